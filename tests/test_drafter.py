"""The remote drafter made real (issue 50, docs/DRAFTER.md): the drafter model's shapes and
forward, the server's drafter kinds (`draft`, `stream-draft`) through a real server, its
batches across sessions, and every bad input's one line. The tiny preset on the CPU; the
GPU figures are benchmarks (benchmarks/bench_drafter.py), never timed tests."""

import dataclasses
import json
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the drafter model needs torch: pip install 'hopbench[drafter]'")

from hopbench.core import protocol as P  # noqa: E402
from hopbench.core.batcher import Batcher  # noqa: E402
from hopbench.core.client import Session  # noqa: E402
from hopbench.core.kinds import KINDS  # noqa: E402
from hopbench.core.kinds.draft import NO_DRAFTER  # noqa: E402
from hopbench.errors import ConfigError, HopbenchError, Refused  # noqa: E402
from hopbench.models import drafter as DM  # noqa: E402
from hopbench.workload import stream as ST  # noqa: E402
from tests.conftest import ServerThread  # noqa: E402

TINY = DM.TINY
ROW = TINY.row_bytes  # 640 B: 5 taps x 64 BF16 values
ROWWISE = dataclasses.replace(TINY, name="tiny-rowwise", block_size=0)  # one row sampled: --early all runs it


@pytest.fixture(scope="module")
def model():
    return DM.Model(TINY, device="cpu")


@pytest.fixture(scope="module")
def rowwise():
    return DM.Model(ROWWISE, device="cpu")


@pytest.fixture
def drafter_server(model):
    st = ServerThread(drafter=Batcher(model), max_sessions=4)
    yield st
    st.stop()


def _rows(n, seed=0):
    return np.random.default_rng(seed).integers(0, 1 << 16, n * TINY.fc_in_features, dtype=np.uint16).view(np.uint8)


def test_the_presets_read_what_their_sources_say():
    d = DM.DSPARK_GLM5
    assert d.row_bytes == 61440 and d.taps == 5  # the study's 5 x 6144 x 2 B per accepted token
    assert 5.6e9 < d.weight_bytes() < 5.8e9, d.weight_bytes()  # the study's "~5.7 GB read per step"
    assert DM.EAGLE3_LLAMA70B.needs_tokens and not d.needs_tokens
    assert set(DM.PRESETS) >= {"dspark-glm5", "eagle3-llama70b", "eagle3-llama8b", "tiny"}


def test_the_eagle3_8b_preset_is_what_its_published_config_reads_as(tmp_path):
    """The preset equals the shape hopbench reads from the published draft config's keys (a
    Llama-3.1-8B EAGLE-3: one layer, 32 / 8 heads, a 32,000-token draft vocabulary), and the
    drafter's help lists it without a second list to edit."""
    import dataclasses

    from typer.testing import CliRunner

    from hopbench.cli import app

    config = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 4096, "num_hidden_layers": 1,
              "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
              "draft_vocab_size": 32000}
    (tmp_path / "config.json").write_text(json.dumps(config))
    read = DM.parse_shape(str(tmp_path / "config.json"))
    preset = DM.PRESETS["eagle3-llama8b"]
    assert dataclasses.replace(read, name=preset.name, source=preset.source) == preset
    assert (preset.row_bytes, preset.taps, preset.kv_bytes_per_token()) == (24576, 3, 4096)
    assert 0.8e9 < preset.weight_bytes() < 0.9e9, preset.weight_bytes()
    out = CliRunner().invoke(app, ["drafter", "--help"], env={"COLUMNS": "250"}).output
    assert "eagle3-llama8b" in out, out


def test_a_config_json_gives_the_shape_and_its_faults_are_one_line(tmp_path):
    good = {"hidden_size": 64, "num_hidden_layers": 1, "intermediate_size": 96, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 300, "hopbench_taps": 5}
    (tmp_path / "config.json").write_text(json.dumps(good))
    s = DM.parse_shape(str(tmp_path))
    assert (s.hidden_size, s.head_dim, s.fc_in_features, s.vocab_size) == (64, 16, 320, 300)
    for bad, says in (({k: v for k, v in good.items() if k != "vocab_size"}, "lacks 'vocab_size'"),
                      ({**good, "num_hidden_layers": "one"}, "'num_hidden_layers' must be a non-negative integer"),
                      ({**good, "num_key_value_heads": 3}, "not a multiple of num_key_value_heads"),
                      ({**good, "needs_tokens": "yes"}, "'needs_tokens' must be true or false")):
        (tmp_path / "config.json").write_text(json.dumps(bad))
        with pytest.raises(ConfigError, match=says):
            DM.parse_shape(str(tmp_path / "config.json"))
    with pytest.raises(ConfigError, match="unknown drafter shape"):
        DM.parse_shape("no-such-preset")


def test_a_shape_too_big_for_the_host_is_refused_in_one_line():
    huge = DM.DrafterShape("huge", 16384, 200, 65536, 128, 128, 128, 1_000_000, 5 * 16384)
    with pytest.raises(ConfigError, match="do not fit this host's available memory"):
        DM.Model(huge, device="cpu")


def test_weights_load_with_their_shapes_checked(tmp_path, model):
    from safetensors.torch import save_file

    path = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in model.tensors().items()}, str(path))
    loaded = DM.Model(TINY, weights=path, device="cpu")
    x = model.rows_from(_rows(3), 1, 3)
    assert (loaded.run(x, 2)[0] == model.run(x, 2)[0]).all()  # the same weights: the same ids
    assert loaded.info()["ids_meaningful"] and not model.info()["ids_meaningful"]
    import numpy as np

    big = np.full(3 * TINY.fc_in_features, 0x4120, dtype=np.uint16).view(np.uint8)  # BF16 10.0: a real outlier
    assert float(loaded.rows_from(big, 1, 3).max()) == 10.0  # real weights see the rows as sent
    assert float(model.rows_from(big, 1, 3).max()) == 4.0  # random weights: clamped (their ids mean nothing)
    wrong = model.tensors()
    wrong["lm_head.weight"] = torch.zeros(10, 64)
    save_file({k: v.contiguous() for k, v in wrong.items()}, str(path))
    with pytest.raises(ConfigError, match=r"lm_head.weight is \[10, 64\], the config says \[512, 64\]"):
        DM.Model(TINY, weights=path, device="cpu")
    save_file({"fc.weight": model.tensors()["fc.weight"].contiguous()}, str(path))
    with pytest.raises(ConfigError, match="no tensor"):
        DM.Model(TINY, weights=path, device="cpu")
    for junk in (bytes(range(256)) * 4, b"{}", b""):  # not a safetensors file at all: one line naming it
        path.write_bytes(junk)
        with pytest.raises(ConfigError, match=f"{path}: not a .safetensors file"):
            DM.Model(TINY, weights=path, device="cpu")


def test_fc_by_taps_sums_to_fc_and_one_causal_forward_holds_every_candidate(rowwise):
    """What the early start rests on: fc is linear over the taps, and with causal attention
    the forward's row a is the forward of rows[:a + 1] (so --early all is the real forward)."""
    model = rowwise
    with torch.inference_mode():
        x = model.rows_from(_rows(4, 1), 1, 4)
        parts = sum(model.fc(x[..., j * 64:(j + 1) * 64], tap=j) for j in range(TINY.taps))
        assert torch.allclose(parts, model.fc(x), atol=1e-4)
        every = model.sample(model.trunk(model.fc(x))[0], 2)  # one forward, every candidate row
        for a in range(4):
            alone = model.forward(x[:, :a + 1], 2)[0]
            assert (every[a] == alone).all(), a


def test_a_drafter_plan_runs_the_model_and_records_its_times(drafter_server, model):
    plan = P.Plan("tcp", 3 * ROW, 8, 2, 4, 30, 3, drafter=P.DrafterPlan())
    assert plan.kind == "draft" and KINDS["draft"].serving(plan).name == "drafter"
    with Session(drafter_server.host, drafter_server.port) as s:
        m = s.measure(plan)
        env = s.server_env["drafter"]
        assert env["shape"]["name"] == "tiny"
        documented = {"shape", "device", "gpu", "dtype", "weights", "weight_bytes", "cuda_graphs", "torch",
                      "context", "context_kv_bytes", "bandwidth_methods", "read_bytes_per_s", "read_floor_ns",
                      "ids_meaningful"}  # docs/PROTOCOL.md
        assert set(env) == documented and (env["gpu"] is None) == (env["device"] == "cpu")
        info = s.drafter  # the typed record, read once from the HELLO
        assert info is not None and info.row_bytes == ROW and info.to_dict() == env
        assert info.where == f"tiny on {env['gpu'] or 'cpu'}"
        assert env["shape"]["fc_in_features"] // env["shape"]["hidden_size"] == 5  # its taps, as documented
        s.bye()
    st = m.stages
    assert m.completed == plan.total and (st["draft_ns"] > 0).all() and (st["batch_rows"] == 3).all()
    assert (st["hop_ex_draft_ns"] == m.samples_ns - st["draft_ns"]).all()
    assert (st["hop_ex_draft_ns"] > 0).all()  # the forward is inside the reply time


def test_bad_drafter_plans_are_refused_in_one_line_and_the_next_is_served(drafter_server, server):
    with Session(server.host, server.port) as s:  # a server without a drafter
        with pytest.raises(Refused, match="runs no drafter model"):
            s.measure(P.Plan("tcp", 3 * ROW, 8, 2, 4, 5, 1, drafter=P.DrafterPlan()))
    assert "serve --drafter SHAPE" in NO_DRAFTER
    with Session(drafter_server.host, drafter_server.port) as s:
        with pytest.raises(Refused, match="are not whole rows"):
            s.measure(P.Plan("tcp", 3 * ROW + 8, 8, 2, 4, 5, 1, drafter=P.DrafterPlan()))
    with Session(drafter_server.host, drafter_server.port) as s:
        with pytest.raises(Refused, match="not with --memory cuda, --verify or --codec"):
            s.measure(P.Plan("tcp", 3 * ROW, 8, 2, 4, 5, 1, verify=True, payload_crc32=0, drafter=P.DrafterPlan()))
    with Session(drafter_server.host, drafter_server.port) as s:  # and the next is served
        assert s.measure(P.Plan("tcp", ROW, 8, 2, 4, 5, 1, drafter=P.DrafterPlan())).completed == 7


def test_early_all_is_refused_for_a_drafter_that_needs_the_accept_count(drafter_server):
    eagle_like = DM.DrafterShape("tok", 64, 1, 96, 4, 2, 16, 256, 5 * 64, needs_tokens=True)
    st = ServerThread(drafter=Batcher(DM.Model(eagle_like, device="cpu")))
    try:
        for server, why in ((st, "conditioned on the bonus token"), (drafter_server, "drafts a block over every")):
            with Session(server.host, server.port) as s:
                plan = P.Plan("tcp", 5 * 3 * 128, 8, 2, 4, 5, 1, stream=P.StreamPlan(5, 3 * 128),
                              drafter=P.DrafterPlan("all"))
                with pytest.raises(Refused, match=why):
                    s.measure(plan, stream=ST.schedule((8, 23, 39, 55, 70), 2.0, 78))
    finally:
        st.stop()


@pytest.mark.parametrize("early,block", [("off", True), ("fc", True), ("off", False), ("fc", False), ("all", False)])
def test_a_streamed_plan_starts_the_drafter_on_the_landed_taps(drafter_server, rowwise, early, block):
    size = 3 * 64 * 2  # K + 1 = 3 rows of one tap
    plan = P.Plan("tcp", 5 * size, 8, 2, 4, 10, 2, stream=P.StreamPlan(5, size), drafter=P.DrafterPlan(early))
    assert plan.kind == "stream-draft"
    st = drafter_server if block else ServerThread(drafter=Batcher(rowwise))
    try:
        with Session(st.host, st.port) as s:
            m = s.measure(plan, stream=ST.schedule((8, 23, 39, 55, 70), 3.0, 78))
            s.bye()
    finally:
        if not block:
            st.stop()
    st = m.stages
    assert m.completed == plan.total and (st["draft_ns"] > 0).all() and (st["batch_rows"] == 3).all()
    assert ((st["early_ns"] > 0).all() if early != "off" else (st["early_ns"] == 0).all()), st["early_ns"]


def test_waiting_sessions_share_one_forward(model):
    batcher = Batcher(model, window_s=30.0, max_batch=4)  # the wait ends when the other arrives
    batcher.join(), batcher.join()
    got = []
    threads = [threading.Thread(target=lambda i=i: got.append(batcher.submit(_rows(3, i).tobytes(), 3, 2)))
               for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [a.batch_rows for a in got] == [6, 6] and got[0].draft_ns == got[1].draft_ns
    batcher.leave(), batcher.leave()
    alone = batcher.submit(_rows(3).tobytes(), 3, 2)  # nobody else serving: no window waited
    assert alone.batch_rows == 3


def test_run_remote_drafter_end_to_end_and_the_verdict_uses_its_time(drafter_server, tmp_path):
    peer = f"{drafter_server.host}:{drafter_server.port}"
    base = [sys.executable, "-m", "hopbench", "run", "--peer", peer, "--remote-drafter", "--results-dir",
            str(tmp_path), "--no-floor", "--cycles", "20", "--warmup", "2"]
    wrong = subprocess.run(base + ["--tokens", "3"], capture_output=True, text=True, timeout=120)
    assert wrong.returncode != 0 and "give --shape the drafter's shape" in wrong.stderr, wrong.stderr
    out = subprocess.run(base + ["--tokens", "3", "--shape", "configs/shape-tiny.toml"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "T3!draft: the forward p50" in out.stdout and "not meaningful tokens" in out.stdout
    assert re.search(r"ledger \(p50s of \d+ and \d+ timed cycles, ms; their intervals above\): echo", out.stdout), out.stdout
    assert "says how the path works, not what the drafter costs on its GPU" in out.stdout  # a CPU's forward
    folder = next(tmp_path.glob("*-run"))
    import csv

    cycles = [r for r in csv.DictReader(open(folder / "samples.csv")) if r["payload"] == "T3!draft"]
    assert len(cycles) >= 20
    for c in cycles:  # the ledger adds up: its parts inside the server's time, the server's inside the hop
        parts = sum(int(c[k]) for k in ("queue_ns", "stage_ns", "draft_ns", "back_ns"))
        assert 0 < parts <= int(c["server_ns"]) < int(c["rtt_ns"]), c
        assert int(c["hop_ex_server_ns"]) == int(c["rtt_ns"]) - int(c["server_ns"])
    page = subprocess.run([sys.executable, "-m", "hopbench", "report", str(folder), "--json"], capture_output=True,
                          text=True, timeout=120)  # the ledger as a stacked bar per drafter payload
    assert page.returncode == 0, page.stderr
    (led,) = json.loads(page.stdout)["ledger"]
    from hopbench.analysis.drafter import LEDGER_PARTS

    parts = sum(led[k] for k in LEDGER_PARTS)
    assert led["payload"] == "T3!draft" and parts == pytest.approx(led["hop"]) and led["forward"] > 0, led
    assert 'id="fig-ledger"' in (folder / "report.html").read_text()
    # a decode cycle slow enough that the tiny drafter's CPU forward is faster than t_draft on any
    # host, however loaded (a loaded 2-core host measured 188 ms): the test is the plumbing, not a time
    v = subprocess.run([sys.executable, "-m", "hopbench", "verdict", str(folder), "--shape", "configs/shape-tiny.toml",
                        "--t-draft", "60000", "--cycle", "120000", "--tok-s", "0.02", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert v.returncode == 0, v.stderr
    doc = json.loads(v.stdout)["results"][0]
    assert doc["inputs"]["t_draft_remote_from"].startswith("measured: T3!draft's draft_ns")
    assert doc["inputs"]["t_draft_remote_ms"] > 0
    calls = {x["transport"]: x for x in doc["verdicts"]}
    assert set(calls) == {"tcp", "tcp!draft"}, calls
    d = subprocess.run([sys.executable, "-m", "hopbench", "drafter", "--shape", "tiny", "--rows", "1,3", "--repeats",
                        "5", "--results-dir", str(tmp_path / "d")], capture_output=True, text=True, timeout=120)
    assert d.returncode == 0 and "x floor" in d.stdout, d.stderr
    given = subprocess.run([sys.executable, "-m", "hopbench", "verdict", "--hop-ms", "a=1", "--t-draft-remote",
                            str(next((tmp_path / "d").iterdir())), "--json"], capture_output=True, text=True, timeout=60)
    assert given.returncode == 0, given.stderr
    told = json.loads(given.stdout)["results"][0]["inputs"]["t_draft_remote_from"]
    assert re.search(r"hopbench drafter, tiny on .+, 3 rows", told), told  # cpu here, the GPU's name on a GPU host


def test_early_all_against_a_drafter_that_cannot_is_refused_before_anything_is_measured(drafter_server, tmp_path):
    """Issue 62 item 8: refused only after five payloads were measured; now at the HELLO."""
    out = subprocess.run([sys.executable, "-m", "hopbench", "run", "--peer", f"{drafter_server.host}:{drafter_server.port}",
                          "--stream", "layers,forward=2,early=all", "--remote-drafter", "--shape",
                          "configs/shape-tiny.toml", "--cycles", "5", "--no-floor", "--out", str(tmp_path / "r")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "early=all: the server's tiny drafter drafts a block" in out.stderr, out.stderr
    assert "payload" not in out.stdout  # no table: nothing was measured


def test_early_needs_the_remote_drafter_and_a_stream():
    from hopbench.orchestration.runjob import RunRequest, plan

    with pytest.raises(ConfigError, match="needs --remote-drafter"):
        plan(RunRequest(host="h", port=1, transport="tcp", early="fc"))
    with pytest.raises(ConfigError, match="needs --stream layers"):
        plan(RunRequest(host="h", port=1, transport="tcp", early="fc", remote_drafter=True))
    with pytest.raises(ConfigError, match="none of this run's payloads is a drafter payload"):  # issue 62 item 16
        plan(RunRequest(host="h", port=1, transport="tcp", remote_drafter=True, codec="fp8"))


def test_spec_runs_the_servers_drafter_model_in_place_of_its_work_model(drafter_server, tmp_path):
    peer = f"{drafter_server.host}:{drafter_server.port}"
    out = subprocess.run([sys.executable, "-m", "hopbench", "spec", "--peer", peer, "--shape", "configs/shape-tiny.toml",
                          "--modes", "sync", "--cycles", "8", "--warmup", "1", "--repeats", "1", "--time-scale", "0.05",
                          "--results-dir", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "remote draft model" in out.stdout, out.stdout  # unasked: the server runs a drafter model
    wrong = subprocess.run([sys.executable, "-m", "hopbench", "spec", "--peer", peer, "--modes", "sync", "--cycles", "3",
                            "--repeats", "1", "--draft-remote", "model", "--results-dir", str(tmp_path / "w")],
                           capture_output=True, text=True, timeout=120)
    assert wrong.returncode != 0 and "takes rows of 640 B" in wrong.stderr, wrong.stderr
    assert not (tmp_path / "w").exists() or not list((tmp_path / "w").rglob("cycles.csv"))  # refused before any mode ran


def test_a_block_drafter_refuses_more_drafts_than_its_block_holds(drafter_server):
    """The tiny preset drafts blocks of 8 (an anchor and 7 drafts): K = 8 is refused in one
    line, as a drafter plan and as a spec plan's `model` draft."""
    from hopbench.core import spec as S

    with Session(drafter_server.host, drafter_server.port) as s:
        with pytest.raises(Refused, match="drafts blocks of 8 .*K = 8 does not fit; use K <= 7"):
            s.measure(P.Plan("tcp", ROW, 8 * 4, 8, 4, 5, 1, drafter=P.DrafterPlan()))
    info = S.SpecPlanInfo("sync", 8, 4, ROW, 5, 1, 1)
    plan = P.Plan("tcp", info.request_bytes, info.reply_bytes, 8, 4, 5, 1, spec=P.SpecPlan("sync", ROW, "model"))
    with Session(drafter_server.host, drafter_server.port) as s:
        with pytest.raises(Refused, match="--draft-remote model: the tiny drafter drafts blocks of 8"):
            s.measure(plan, spec=S.SpecInputs(info, np.zeros(info.total, dtype=np.int64), S.parse_work("sleep:0")))


def test_a_drafter_folders_batched_forward_carries_into_verdict_report_and_spec(tmp_path):
    """Issue 64 "carried through": --t-draft-remote FOLDER --drafter-targets M reads the forward
    of M targets; spec --draft-remote batch:FOLDER fits A + B to the folder's 1..M forwards."""
    from hopbench.analysis.drafter import batch_model, from_drafter_folder
    from hopbench.orchestration.spec import SpecConfig

    d = subprocess.run([sys.executable, "-m", "hopbench", "drafter", "--shape", "tiny", "--rows", "3,8", "--targets",
                        "1,2,4", "--repeats", "5", "--context", "64", "--results-dir", str(tmp_path / "d")],
                       capture_output=True, text=True, timeout=180)
    assert d.returncode == 0, d.stderr
    folder = next((tmp_path / "d").iterdir())
    rows = json.loads((folder / "drafter.json").read_text())["rows"]
    at = {(r["targets"], r["rows"]): r["p50_ns"] / 1e6 for r in rows if r["graphs"] == rows[0]["graphs"]}
    v = subprocess.run([sys.executable, "-m", "hopbench", "verdict", "--hop-ms", "a=1", "--t-draft-remote", str(folder),
                        "--drafter-targets", "4", "--json"], capture_output=True, text=True, timeout=60)
    assert v.returncode == 0, v.stderr
    inputs = json.loads(v.stdout)["results"][0]["inputs"]
    assert inputs["t_draft_remote_ms"] == at[(4, 3)] and "a batch of 4 targets, a 64-token context" in \
        inputs["t_draft_remote_from"], inputs
    with pytest.raises(ConfigError, match=r"no forward of 8 targets was measured \(measured: 1, 2, 4"):
        from_drafter_folder(folder, 3, 8)
    r = subprocess.run([sys.executable, "-m", "hopbench", "report", str(tmp_path / "nothing"), "--t-draft-remote", "2",
                        "--drafter-targets", "2"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--drafter-targets goes with --t-draft-remote DRAFTER_FOLDER" in r.stderr, r.stderr
    a, b, source = batch_model(folder, 8)  # K = 7: the block's 8 rows
    xs = np.array([1.0, 2.0, 4.0])
    ys = np.array([at[(m, 8)] for m in (1, 2, 4)])
    fit_b, fit_a = np.polyfit(xs, ys, 1)
    assert (a, b) == pytest.approx((max(fit_a, 0), max(fit_b, 0))) and "ms by targets 1:" in source
    cfg = SpecConfig(bytes_per_token=640, id_bytes=4, modes=("local",), k=7, draft_remote=f"batch:{folder}").check()
    assert cfg.draft_remote == f"batch:{a:.4f}+{b:.4f}" and cfg.draft_remote_from == source


def _group(st, plans):
    """Each plan from a session of its own, started together; their measurements."""
    got, errors = {}, []

    def target(i, plan):
        try:
            with Session(st.host, st.port) as s:
                got[i] = s.measure(plan)
                s.bye()
        except BaseException as exc:  # the test reads it
            errors.append(exc)

    threads = [threading.Thread(target=target, args=(i, p)) for i, p in enumerate(plans)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    return got


def test_a_start_groups_sessions_are_served_by_one_loop_and_batched(model):
    """Several targets, one drafter: one thread serves the group's cycles (core.batcher.Loop),
    the waiting sessions' rows run as one forward, and each session's ledger adds up."""
    batcher = Batcher(model, window_s=10.0, max_batch=4)
    st = ServerThread(drafter=batcher, max_sessions=4)
    try:
        group = P.GroupPlan("g", 3)
        plan = P.Plan("tcp", 3 * ROW, 8, 2, 4, 30, 3, drafter=P.DrafterPlan(), group=group)
        got = _group(st, [plan] * 3)
    finally:
        st.stop()
    assert batcher._loop is not None and not batcher._loop.held
    for m in got.values():
        st_ = m.stages
        assert m.completed == plan.total
        assert (st_["batch_rows"] == 9).mean() > 0.5, st_["batch_rows"]  # all three, once all had joined
        parts = st_["queue_ns"] + st_["stage_ns"] + st_["draft_ns"] + st_["back_ns"]
        assert ((0 < parts) & (parts <= st_["server_ns"]) & (st_["server_ns"] < m.samples_ns)).all()


def test_a_group_member_that_ends_first_leaves_no_window_to_wait_out(model):
    """A target of two whose plan is shorter ends first: the other's batches wait for nobody
    (a 30 s window waited out each cycle would outlast the threads' joins)."""
    batcher = Batcher(model, window_s=30.0, max_batch=4)
    st = ServerThread(drafter=batcher, max_sessions=4)
    group = P.GroupPlan("h", 2)
    short, long = (P.Plan("tcp", 3 * ROW, 8, 2, 4, n, 0, drafter=P.DrafterPlan(), group=group) for n in (5, 25))
    try:
        got = _group(st, [short, long])
    finally:
        st.stop()
    assert got[0].completed == short.total and got[1].completed == long.total
    assert (got[1].stages["batch_rows"][short.total + 5:] == 3).all()


def test_a_batch_received_into_the_models_slots_runs_as_one_copied_in():
    """DraftModel.slots: bodies received straight into the pinned slots (the Loop does) give
    the ids of the same bodies copied in; on a CPU there are none (nothing is staged)."""
    torch = pytest.importorskip("torch")
    assert DM.Model(TINY, device="cpu").slots(3, 2) == []
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here: slots exist where a graphed GPU forward stages its batch")
    m = DM.Model(TINY, device="cuda", sessions=4)
    slots = m.slots(3, 2)
    bodies = [_rows(3, i).tobytes() for i in range(3)]
    for j, b in enumerate(bodies):
        slots[j][:] = b
    ids_slots, *_ = m.run_bodies(slots[:3], 3, 2)
    ids_copied, *_ = m.run_bodies(bodies, 3, 2)
    assert (np.asarray(ids_slots) == np.asarray(ids_copied)).all()
    ids_out_of_order, *_ = m.run_bodies([slots[1], slots[0], slots[2]], 3, 2)  # not slots 0..n-1: copied in
    assert (np.asarray(ids_out_of_order)[[1, 0, 2]] == np.asarray(ids_copied)).all()


def test_a_group_member_out_of_step_ends_alone_and_the_server_serves_the_next(model, monkeypatch):
    """In the loop, a target whose request carries the wrong seq is aborted (its session
    ends); the group's other target runs all its cycles and a new session is served after."""
    from hopbench.core import timing

    real = timing.run_cycles

    def run_cycles(chan, request, reply, *args, **kw):
        if threading.current_thread().name != "bad":
            return real(chan, request, reply, *args, **kw)
        P.SEQ.pack_into(request, 0, 7)  # cycle 0 says it is cycle 7
        chan.send(request)
        chan.recv_into(reply)  # the server's abort, in a reply-sized message
        raise ConnectionError("out of step")

    monkeypatch.setattr(timing, "run_cycles", run_cycles)
    batcher = Batcher(model, window_s=30.0, max_batch=4)
    st = ServerThread(drafter=batcher, max_sessions=4)
    plan = P.Plan("tcp", 3 * ROW, 8, 2, 4, 20, 0, drafter=P.DrafterPlan(), group=P.GroupPlan("b", 2))
    got, failed = {}, {}

    def target(name):
        try:
            with Session(st.host, st.port) as s:
                got[name] = s.measure(plan)
        except Exception as exc:  # the bad one's end, read below
            failed[name] = exc

    try:
        threads = [threading.Thread(target=target, args=(n,), name=n) for n in ("good", "bad")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert set(got) == {"good"} and set(failed) == {"bad"}, (got, failed)
        assert got["good"].completed == plan.total
        with Session(st.host, st.port) as s:  # the next client
            alone = s.measure(dataclasses.replace(plan, group=None))
            s.bye()
        assert alone.completed == plan.total
    finally:
        st.stop()


def test_a_slow_sender_holds_up_no_other_session(model, monkeypatch):
    """The loop takes what a socket has without waiting for the rest: a target whose first
    request stops half-way does not stall another target's cycles (with a blocking receive
    in the loop this test would hang: the slow one sends its rest only after the other ends)."""
    from hopbench.core import timing

    real, half_in, other_done = timing.run_cycles, threading.Event(), threading.Event()

    def run_cycles(chan, request, reply, ids, samples, **kw):
        if threading.current_thread().name != "slow":
            assert half_in.wait(60)  # the other target's cycles start once the slow one's request is half in
            done = real(chan, request, reply, ids, samples, **kw)
            other_done.set()
            return done
        view = memoryview(request).cast("B")
        for seq in range(len(samples)):
            P.SEQ.pack_into(request, 0, seq)
            if seq == 0:
                chan.send(view[:len(view) // 2])
                half_in.set()
                assert other_done.wait(60)  # the other target's whole plan, while this request is half in
                chan.send(view[len(view) // 2:])
            else:
                chan.send(request)
            chan.recv_into(reply)
            samples[seq] = 1
        return len(samples)

    monkeypatch.setattr(timing, "run_cycles", run_cycles)
    st = ServerThread(drafter=Batcher(model), max_sessions=4)
    plan = P.Plan("tcp", 3 * ROW, 8, 2, 4, 20, 0, drafter=P.DrafterPlan())
    got, failed = {}, {}

    def target(name):
        try:
            with Session(st.host, st.port) as s:
                got[name] = s.measure(plan)
                s.bye()
        except Exception as exc:  # read below
            failed[name] = exc

    try:
        slow = threading.Thread(target=target, args=("slow",), name="slow")
        slow.start()
        other = threading.Thread(target=target, args=("other",), name="other")
        other.start()
        for t in (other, slow):
            t.join(90)
    finally:
        st.stop()
    assert not failed and got["other"].completed == got["slow"].completed == plan.total, (got, failed)


def test_a_silent_target_times_out_in_the_loop_and_the_next_is_served(model, monkeypatch):
    """A target that stops sending mid-plan is ended after the server's timeout (its session's
    log says so), as its own thread's receive would end it; the next client is served."""
    from hopbench.core import timing

    real = timing.run_cycles

    def run_cycles(chan, request, reply, *args, **kw):
        if threading.current_thread().name != "silent":
            return real(chan, request, reply, *args, **kw)
        chan.recv_into(reply)  # sends nothing: returns (or raises) once the server has given up on it
        raise ConnectionError("silent")

    monkeypatch.setattr(timing, "run_cycles", run_cycles)
    st = ServerThread(drafter=Batcher(model), max_sessions=4, idle_timeout_s=1.0)
    plan = P.Plan("tcp", 3 * ROW, 8, 2, 4, 10, 0, drafter=P.DrafterPlan())

    def silent():
        with pytest.raises((HopbenchError, OSError)), Session(st.host, st.port) as s:
            s.measure(plan)

    try:
        t = threading.Thread(target=silent, name="silent")
        t.start()
        t.join(60)
        assert not t.is_alive()
        with Session(st.host, st.port) as s:
            assert s.measure(plan).completed == plan.total
            s.bye()
    finally:
        st.stop()  # the sessions have ended, and logged why
    assert any("receive timed out after 1.0 s" in line for line in st.lines), st.lines
