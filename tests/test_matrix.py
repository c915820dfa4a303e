"""hopbench matrix: the pair schedule, the driver with in-process agents (the same _Agent
class the Ray actors run), a node that leaves, resuming, the outlier rule; and, as root
with Ray installed, a 4-node Ray cluster in network namespaces with one node's link slowed,
which the matrix must name (test_matrix_names_the_slowed_node_on_a_ray_cluster)."""

import json

import pytest

from hopbench import results as R
from hopbench.analysis import matrix as AM
from hopbench.orchestration import matrix as M
from hopbench.shape import load_shape


def test_rounds_are_disjoint_and_cover_every_pair():
    for n in (2, 3, 4, 5, 6):
        nodes = [f"n{i}" for i in range(n)]
        for ordered in (False, True):
            rs = M.rounds(nodes, ordered)
            seen = [p for r in rs for p in r]
            assert sorted(seen) == sorted(M.pairs(nodes, ordered))  # each pair exactly once
            for r in rs:
                members = [x for p in r for x in p]
                assert len(members) == len(set(members))  # no node twice in a round


class InProcess:
    """Agents on loopback in this process: one _Agent (the Ray actor's class) per node."""

    def __init__(self, n: int, leave_after: dict | None = None):
        self.agents = {f"127.0.0.1#{i}": M._Agent("127.0.0.1", None, {}, "auto", "auto") for i in range(n)}
        self.calls = {k: 0 for k in self.agents}
        self.leave_after = leave_after or {}

    def _use(self, node):
        self.calls[node] += 1
        if node in self.leave_after and self.calls[node] > self.leave_after[node]:
            raise M.NodeLeft("its agent died (test)", node)
        return self.agents[node]

    def nodes(self):
        return list(self.agents)

    def doctor(self, node):
        return {"interfaces": [], "findings": [], "route_interface": "lo", "qdisc": []}

    def serve(self, node):
        return self._use(node).serve()

    def run(self, node, host, port, job):
        return self._use(node).run(host, port, job)

    def close(self):
        for a in self.agents.values():
            a.stop()


CFG = dict(tokens=(1, 3), repeats=2, cycles=15, warmup=2, **M.shape_fields(load_shape()))


def test_matrix_writes_sweep_cells_that_the_analysis_reads(tmp_path):
    agents = InProcess(3)
    folder = M.run_matrix(agents, M.MatrixConfig(**CFG), tmp_path / "m", log=lambda s: None)
    agents.close()
    top = json.loads((folder / "sweep.json").read_text())
    assert top["status"] == "complete" and top["kind"] == "matrix" and len(top["rungs"]) == 3
    cells = sorted(folder.glob("cells/*/*/*/*/report.json"))
    assert len(cells) == 3 * 2 * 2  # pairs x payloads x repeats
    ph, op = AM.hops(folder)
    assert op == 3 and len(ph) == 3 and all(v > 0 for v in ph.values())
    from hopbench.analysis.data import load_groups

    groups, _ = load_groups(folder)
    assert {g.rung for g in groups} == set(top["rungs"]) and all(len(g.repeat_p50_ns) == 2 for g in groups)
    lines, doc = AM.report(folder)
    assert doc["schema"] == "hopbench.matrix" and len(doc["hops_ms"]) == 3


def test_a_node_that_leaves_is_reported_and_the_rest_continue_then_resume(tmp_path):
    agents = InProcess(4, leave_after={"127.0.0.1#0": 2})
    cfg = M.MatrixConfig(**CFG)
    folder = M.run_matrix(agents, cfg, tmp_path / "m", log=lambda s: None)
    agents.close()
    top = json.loads((folder / "sweep.json").read_text())
    assert "127.0.0.1#0" in top["matrix"]["left"] and top["status"] == "incomplete"
    failed = {c["key"].split("/")[0] for c in top["failed_cells"]}
    assert failed and all("127.0.0.1#0" in k for k in failed)
    done = [p for p in R.ResultFolder(folder).cell_reports() if R.run_complete(p.parent)]
    untouched = [k for k in top["rungs"] if "#0" not in k]
    assert {p.parts[-5] for p in done} >= set(untouched)  # every pair without the node that left
    # the node comes back: the same command measures only what is missing
    again = InProcess(4)
    before = {p: p.stat().st_mtime_ns for p in done}
    M.run_matrix(again, cfg, folder, log=lambda s: None)
    again.close()
    assert all(p.stat().st_mtime_ns == t for p, t in before.items())  # finished cells untouched
    assert json.loads((folder / "sweep.json").read_text())["rungs"]


def test_another_configuration_is_not_resumed_into(tmp_path):
    agents = InProcess(2)
    folder = M.run_matrix(agents, M.MatrixConfig(**CFG), tmp_path / "m", log=lambda s: None)
    agents.close()
    from hopbench.errors import ConfigError

    with pytest.raises(ConfigError, match="another configuration"):
        M.run_matrix(InProcess(2), M.MatrixConfig(**{**CFG, "repeats": 3}), folder, log=lambda s: None)


def _doctor(speed=10000, qdisc=None, mtu=1500):
    return {"doctor": {"route_interface": "eth0", "qdisc": qdisc or [{"kind": "noqueue", "options": {}}],
                       "interfaces": [{"name": "eth0", "speed_mbps": speed, "mtu": mtu, "driver": "mlx5_core",
                                       "operstate": "up", "duplex": "full"}], "findings": []}}


def test_outlier_rule_names_the_slow_node_with_its_cause_and_not_the_others():
    nodes = ["a", "b", "c", "d"]
    base = {p: 0.30 + 0.01 * i for i, p in enumerate(M.pairs(nodes, False))}
    hops = {p: (15.7 if "c" in p else v) for p, v in base.items()}
    docs = {n: _doctor() for n in nodes}
    docs["c"] = _doctor(speed=100)
    found = AM.outliers(hops, docs)
    assert [(f.kind, f.name) for f in found] == [("node", "c")]
    assert any("negotiated speed 100" in c for c in found[0].causes)
    # the same numbers with no slow node: nothing named
    assert AM.outliers(base, {n: _doctor() for n in nodes}) == []
    # one bad pair (a cable), no bad node: the pair is named, not a node
    one = dict(base)
    one[("a", "b")] = 9.0
    found = AM.outliers(one, {n: _doctor() for n in nodes})
    assert [(f.kind, f.name) for f in found] == [("pair", "a -> b")]
    # a shaper shows up as the cause
    docs = {n: _doctor() for n in nodes}
    docs["c"] = _doctor(qdisc=[{"kind": "tbf", "options": {"rate": 12500000}}])
    found = AM.outliers(hops, docs)
    assert any("shaper" in c for c in found[0].causes)


@pytest.mark.netns
@pytest.mark.slow
def test_matrix_names_the_slowed_node_on_a_ray_cluster(tmp_path, ray_cluster):
    """4 Ray nodes, each in its own network namespace on one bridge; node 2's link shaped to
    100 Mbit both ways. `hopbench matrix --quick` from the head node must name node 2, and
    everything is cleaned up afterwards."""
    cluster = ray_cluster(nodes=4, slow=2, subnet=89)
    out = tmp_path / "m"
    r = cluster.hopbench(0, "matrix", "--ray", cluster.head, "--quick", "--wait-nodes", "4", "--concurrency", "1",
                         "--out", str(out), "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    named = [(f["kind"], f["name"]) for f in doc["outliers"]]
    assert named == [("node", cluster.addresses[2])], (named, r.stderr[-2000:])
    assert any("shaper" in c for c in doc["outliers"][0]["causes"]), doc["outliers"][0]
    assert (out / "plots" / "matrix_hop.png").stat().st_size > 1000 and (out / "report.html").exists()
    top = json.loads((out / "sweep.json").read_text())
    assert top["status"] == "complete" and len(top["matrix"]["nodes"]) == 4


def test_matrix_with_a_codec_measures_it_beside_the_raw_bytes(tmp_path):
    agents = InProcess(2)
    cfg = M.checked(M.MatrixConfig(**{**CFG, "repeats": 1}, codecs=("none", "int8")))
    folder = M.run_matrix(agents, cfg, tmp_path / "m", log=lambda s: None)
    agents.close()
    from hopbench.analysis.data import load_groups

    groups, _ = load_groups(folder)
    assert {g.transport for g in groups} == {"tcp", "tcp+int8"}
    assert {g.payload for g in groups} == {"T1", "T3", "T1+int8", "T3+int8"}
