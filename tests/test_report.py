"""hopbench report: one self-contained page for a sweep and a run, its JSON document
equal to what the analysis commands print, and result ids that survive a rename; the
case-study export validated against docs/case-studies.schema.json."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import cli, run_folder

pytest.importorskip("matplotlib")
pytest.importorskip("scipy")

GOLDEN = Path(__file__).parent / "golden"
ROOT = Path(__file__).resolve().parent.parent


def hb(*args, ok=True):
    r = subprocess.run([sys.executable, "-m", "hopbench", *map(str, args)], capture_output=True, text=True,
                       timeout=180, cwd=ROOT)
    if ok:
        assert r.returncode == 0, r.stderr
    return r


def fetches(page: str) -> list[str]:
    """Anything the page would load from elsewhere (namespace URIs inside SVG are not fetches)."""
    found = re.findall(r'\b(?:src|href)\s*=\s*["\'](?!#|data:)([^"\']+)', page)
    found += re.findall(r"url\(\s*['\"]?(?!#|data:)([^)'\"]+)", page)
    found += re.findall(r"@import", page) + re.findall(r"<link\b", page)
    return found


@pytest.mark.parametrize("kind", ["sweep-v1", "run-v1"])
def test_report_is_one_self_contained_page_with_the_analysis_numbers(tmp_path, kind):
    folder = shutil.copytree(GOLDEN / kind, tmp_path / kind)
    r = hb("report", folder)
    page_path = folder / "report.html"
    assert r.stdout.splitlines()[0] == f"report: {page_path}"
    page = page_path.read_text()
    assert fetches(page) == []
    for section in ("answer", "verdict", "fit", "figures", "cells", "warnings", "environment", "reproduce"):
        assert f'<section id="{section}">' in page, section
    assert page.index('id="verdict"') < page.index('id="fit"') < page.index('id="figures"')
    doc = json.loads(hb("report", folder, "--json").stdout)
    embedded = json.loads(re.search(r'<script type="application/json" id="hopbench-data">(.*?)</script>', page,
                                    re.S).group(1).replace("<\\/", "</"))
    assert embedded == doc and doc["schema"] == "hopbench.report"
    assert page.count("<svg") >= 2  # inline figures
    if doc["fits"]:
        fits = json.loads(hb("fit", folder, "--json").stdout)["fits"]
        assert [(f["rung"], f["transport"], f["beta_Bps"]) for f in fits] == \
            [(f["rung"], f["transport"], f["beta_Bps"]) for f in doc["fits"]]
    else:  # nothing to fit (run-v1 has two payloads): the report says why and fit exits non-zero saying the same
        r = hb("fit", folder, ok=False)
        assert r.returncode != 0 and "at least 3 payload sizes" in r.stderr
    if kind == "sweep-v1":
        v = json.loads(hb("verdict", folder, "--json").stdout)["results"][0]["verdicts"]
        assert [(x["rung"], x["hop_ms"], x["projected_tok_s"], x["call"]) for x in v] == \
            [(x["rung"], x["hop_ms"], x["projected_tok_s"], x["call"]) for x in doc["verdicts"]]
        assert doc["commands"][0]["command"].startswith("hopbench sweep ")
    else:
        assert doc["kind"] == "run" and doc["verdicts"][0]["rung"] == "run"
        assert any(c["command"].startswith("hopbench run --peer ") for c in doc["commands"])
        assert any(c["command"].startswith("hopbench serve ") for c in doc["commands"])
    # every number shown is tied to a path that exists in the document
    for path in re.findall(r'data-k="([^"]+)"', page):
        node = doc
        for part in path.split("."):
            node = node[int(part)] if isinstance(node, list) else node[part]
        assert isinstance(node, (int, float))


def test_the_report_takes_the_verdicts_inputs_and_answers_as_verdict_does(tmp_path):
    """Issue 62 item 15: `report SWEEP --t-draft-remote 2.245` said "No such option", so the page
    answered with 0 ms (assumed) while verdict answered with the drafter's time."""
    folder = shutil.copytree(GOLDEN / "sweep-v1", tmp_path / "s")
    given = ["--t-draft-remote", "2.245", "--cycle", "80", "--t-draft", "12.5"]
    doc = json.loads(hb("report", folder, *given, "--json").stdout)
    assert doc["inputs"]["t_draft_remote_ms"] == 2.245 and doc["inputs"]["cycle_ms"] == 80
    assert doc["inputs"]["t_draft_ms"] == 12.5 and doc["inputs"]["t_draft_remote_from"] != "assumed"
    verdict = json.loads(hb("verdict", folder, *given, "--json").stdout)["results"][0]
    calls = {(v["rung"], v["transport"]): v["call"] for v in verdict["verdicts"]}
    assert calls == {(v["rung"], v["transport"]): v["call"] for v in doc["verdicts"]}


def test_report_refuses_to_overwrite_another_file(tmp_path):
    folder = shutil.copytree(GOLDEN / "sweep-v1", tmp_path / "s")
    other = tmp_path / "mine.html"
    other.write_text("mine")
    r = hb("report", folder, "-o", other, ok=False)
    assert r.returncode != 0 and "refusing to overwrite" in r.stderr and "Traceback" not in r.stderr
    assert other.read_text() == "mine"
    hb("report", folder)
    hb("report", folder)  # the default page is derived: rebuilt in place


def _validator():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "docs" / "case-studies.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_export_validates_against_the_schema_and_ids_survive_a_rename(tmp_path):
    v = _validator()
    a = shutil.copytree(GOLDEN / "sweep-v1", tmp_path / "a")
    hb("export", a, "--into", tmp_path / "one.json")
    moved = tmp_path / "elsewhere" / "renamed-sweep"
    moved.parent.mkdir()
    a.rename(moved)
    hb("export", moved, "--into", tmp_path / "two.json")
    one = json.loads((tmp_path / "one.json").read_text())
    two = json.loads((tmp_path / "two.json").read_text())
    assert list(v.iter_errors(one)) == [] and list(v.iter_errors(two)) == []
    assert [r["id"] for r in one["runs"]] == [r["id"] for r in two["runs"]]
    assert {r["schema_version"] for r in one["runs"]} == {2}
    assert {r["source"] for r in two["runs"]} == {"renamed-sweep"}
    # re-exporting the moved folder into the first file updates, never duplicates
    r = hb("export", moved, "--into", tmp_path / "one.json")
    assert "0 records added" in r.stdout
    # a different result gets different ids
    hb("export", GOLDEN / "run-v1", "--into", tmp_path / "three.json")
    three = json.loads((tmp_path / "three.json").read_text())
    assert not {r["id"] for r in three["runs"]} & {r["id"] for r in one["runs"]}


def test_the_committed_case_study_data_is_valid():
    v = _validator()
    errors = list(v.iter_errors(json.loads((ROOT / "data" / "case-studies.json").read_text())))
    assert errors == [], errors[0].message


def test_schema_rejects_a_record_that_breaks_it():
    v = _validator()
    a = {"runs": [{"id": "hb-0123456789abcdef", "schema_version": 2, "study": "s"}]}  # most fields missing
    assert list(v.iter_errors(a))
    assert list(v.iter_errors({"runs": [{"id": "hb-0123", "p50_ms": -1}]}))  # a hopbench id, not a hopbench record
    assert not list(v.iter_errors({"runs": [{"id": "manual-1", "note": "kept as is"}]}))  # someone else's record


def test_new_results_carry_their_id(tmp_path):
    from hopbench.analysis.data import result_id

    f = shutil.copytree(GOLDEN / "run-v1", tmp_path / "r")
    old = result_id(f)  # a v1 folder: derived from what it recorded at creation
    doc = json.loads((f / "report.json").read_text())
    doc["result_id"] = "abc123"
    (f / "report.json").write_text(json.dumps(doc))
    assert old.startswith("h-") and result_id(f) == "abc123"


@pytest.mark.parametrize("args", [
    ["--tokens", "1,3", "--k", "3", "--cycles", "200", "--gap-ms", "80", "--link", "lab-100m,rate=100"],
    ["--bytes", "64,4096", "--reply-bytes", "same", "--verify", "--poll", "busy", "--loop", "python", "--timeout", "20"],
    ["--tokens", "3", "--codec", "none,zstd:1,fp8", "--cycles", "50"],
    ["--tokens", "3", "--clients", "4", "--mps", "500:poisson", "--cpu", "0-1"],
    ["--tokens", "3", "--mps", "500", "--arrivals", "poisson"],  # the old spelling
    ["--tokens", "3", "--time", "2.5", "--transport", "zmq", "--opt", "copy_threshold=65536"],
    ["--tokens", "1,3", "--payload", "projected"],
    ["--stream", "layers:80,forward=40,cost=1.2", "--link", "rate=1000"],
    ["--stream", "layers", "--forward-ms", "40", "--layers", "80", "--stream-cost-ms", "1.2"],  # the old spelling
    # every plan kind (issue 49): GPU staged and direct, codec, streamed under a codec, the drafter
    # kinds (the streamed one's forward the shape's default, a float that :g would round)
    ["--tokens", "3", "--memory", "cuda:host"],
    ["--tokens", "3", "--memory", "cuda,direct", "--transport", "ucx"],
    ["--tokens", "3", "--memory", "cuda", "--server-memory", "host", "--gpu-path", "direct", "--transport", "ucx"],  # old
    ["--stream", "layers", "--codec", "fp8"],
    ["--tokens", "3", "--remote-drafter"],
    ["--stream", "layers,early=fc", "--remote-drafter"],
    ["--stream", "layers", "--remote-drafter", "--early", "fc"],  # the old spellings, of early= and of --link
    ["--tokens", "1,3", "--rate", "100", "--rung", "lab-100m", "--interface", "lo"],
    ["--tokens", "3", "--codec", "fp8", "--payload", "projected,from=h.npy"],
    ["--tokens", "3", "--codec", "fp8", "--payload-from", "h.npy"],  # the old spelling
    ["--tokens", "3", "--gap-ms", "80.1234567", "--transport", "mooncake", "--opt", "MOONCAKE_ring_mib=16"],
])
def test_to_argv_every_reproduce_line_records_the_same_config(args, monkeypatch):
    """Issue 39 (REVIEW4 §5.2): the report's reproduce line came from a hand copy of the CLI that
    had drifted (no --codec, --clients, --mps, --time ...): a reproduced run was another run.
    Now it is RunConfig.to_argv(); parsed back through the CLI it gives the same config."""
    import typer.main

    from hopbench.cli import app, run_request
    from hopbench.orchestration import runjob

    cmd = typer.main.get_command(app).commands["run"]
    if any("cuda" in a for a in args):  # the CLI checks CuPy before it plans: the fake stands in for it here
        import fakecupy

        from hopbench.core import gpu

        monkeypatch.setattr(gpu, "_cp", fakecupy)

    def config(argv):
        return runjob.plan(run_request(cmd.make_context("run", list(argv)).params))[1]

    first = config(["--peer", "10.0.0.1:5201", *args])
    line = first.to_argv("10.0.0.1:5201")
    assert line[:2] == ["hopbench", "run"]
    again = config(line[2:])
    assert again == first, {k: (v, getattr(again, k)) for k, v in vars(first).items() if getattr(again, k) != v}


def test_the_servers_reproduce_line_has_what_the_run_needed():
    """A run of several targets needs a server of as many sessions, and a --remote-drafter run
    a server with its drafter model: the report's serve line says both, from the HELLO."""
    from hopbench.analysis.report.document import serve_argv

    def drafter(**kw):  # a HELLO's env.drafter as a server sends it (docs/PROTOCOL.md "Drafter plans")
        return {"shape": {"name": "tiny", "source": "a preset"}, "device": "cuda:0", "weights": "random", "dtype": "bfloat16",
                "weight_bytes": 1, "read_floor_ns": 1, "read_bytes_per_s": 1.0, "ids_meaningful": False,
                "context": 4096, **kw}

    head = {"server_caps": {"max_request_bytes": 1 << 20, "max_sessions": 4}, "server_env": {"drafter": drafter()}}
    line = serve_argv("10.0.0.2", head)
    assert line[line.index("--max-sessions") + 1] == "4" and line[line.index("--drafter") + 1] == "tiny"
    assert line[line.index("--drafter-device") + 1] == "cuda" and "--drafter-weights" not in line
    assert line[line.index("--context") + 1] == "4096"  # the context every forward attended over
    assert "--max-sessions" not in serve_argv("h", {"server_caps": {"max_sessions": 1}})
    from_file = {"server_env": {"drafter": drafter(shape={"name": "x", "source": "/m/config.json"}, context=0,
                                                   weights="/m/w.safetensors")}}
    line = serve_argv("h", from_file)
    assert line[line.index("--drafter") + 1] == "/m/config.json" and line[-1] == "/m/w.safetensors"
    assert line[line.index("--context") + 1] == "0"


def test_plot_draws_a_bytes_only_run_like_report_does(server, tmp_path):
    """Item 8: plot refused the README's `run --bytes grid` folder ('no measurement at T = 3')."""
    from hopbench.records import Payload

    folder = run_folder(server, tmp_path / "b", [Payload(f"B{n}", None, n, 8) for n in (64, 4096, 65536)])
    out = cli("plot", folder)
    assert out.returncode == 0, out.stderr
    assert (folder / "plots" / "latency_vs_payload.svg").exists() and not (folder / "plots" / "hop_cost.svg").exists()
    assert "no hop-cost figure" in out.stdout
    assert cli("report", folder).returncode == 0


def test_every_command_gives_the_same_fit_interval(server, tmp_path):
    """Item 5: export and hopbench.load fitted with 50 resamples, fit and report with 300, so
    a single run's (bootstrapped) beta interval differed by command."""
    import json

    import hopbench
    from hopbench.records import Payload

    folder = run_folder(server, tmp_path / "b", [Payload(f"B{n}", None, n, 8) for n in (64, 4096, 65536, 262144)])
    out = cli("fit", folder, "--json")
    assert out.returncode == 0, out.stderr
    (f,) = json.loads(out.stdout)["fits"]
    assert f["ci_scope"] == "within-run"  # the bootstrapped case, where the resample count matters
    (row,) = hopbench.load(folder).fits.to_dict("records")
    assert row["beta_ci_lo_mbit_s"] == f["beta_ci"][0] * 8 / 1e6 and row["beta_ci_hi_mbit_s"] == f["beta_ci"][1] * 8 / 1e6
    doc = json.loads(cli("report", folder, "--json").stdout)
    assert doc["fits"][0]["beta_ci"] == f["beta_ci"]


def test_the_answer_does_not_offer_loopback_as_a_link_and_says_emulated_rungs_are_emulated(tmp_path):
    """Item 10: loopback was offered in the Answer as a link one could move to, and the page
    never said that emu-* rungs are emulated on one machine."""
    import json
    import shutil

    from hopbench.analysis.report import _answer

    folder = shutil.copytree("tests/golden/sweep-v1", tmp_path / "s")
    doc = json.loads(cli("report", folder, "--json").stdout)
    text = _answer(doc)
    assert "<b>loopback</b></td><td class=\"t wrap\" colspan" in text and "the instrument's own floor" in text
    assert "move the drafter</span>" not in text and "emulated on this one machine" not in text
    doc["rungs"]["loopback"]["kind"] = "emulated"
    assert "<b>loopback</b>*" in _answer(doc) and "* emulated on this one machine" in _answer(doc)


def test_the_answer_is_one_row_per_rung_with_its_inputs_once_and_its_warnings_beside(tmp_path):
    """Issue 62 item 15: the Answer was 20 bullets, twelve repeating one sentence; the drift
    warning sat at the bottom, not on stdout; a --spec rung matching no rung was dropped."""
    import json
    import re
    import shutil

    from hopbench.analysis.report import _answer

    folder = shutil.copytree("tests/golden/sweep-v1", tmp_path / "s")
    doc = json.loads(cli("report", folder, "--json").stdout)
    rungs = list(dict.fromkeys(v["rung"] for v in doc["verdicts"]))
    text = _answer(doc)
    rows = re.findall(r"<tr><td class=\"t\" data-h=\"rung\"><b>([^<]+)</b>", text)
    assert rows == rungs and text.count("Inputs:") == 1 and "the shape's, configs/shape.toml" in text
    assert text.count("surely-largest") == 1  # the explanation once, below the table
    doc["warnings"] = [{"kind": "drift", "text": "d", "rungs": {rungs[0]: [2, 9]},
                        "at": [{"rung": rungs[0], "transport": doc["verdicts"][0]["transport"],
                                "tokens": doc["operating_tokens"], "drift_rel": -0.25}]},
                       {"kind": "loaded host", "rung": rungs[-1], "short": "ucx: +496% over its wire time", "text": "x"}]
    row = {r: t for r, t in re.findall(r"<b>([^<]+)</b>.*?(<td class=\"t wrap\" data-h=\"trust\">.*?</td>)", _answer(doc))}
    assert "drift: 2 of 9 cells" in row[rungs[0]] and "ucx: +496% over its wire time" in row[rungs[-1]], row
    r = cli("report", folder, "--t-draft", "12", "-o", str(tmp_path / "p.html"))
    assert "t_draft <span" in (page := (tmp_path / "p.html").read_text()) and "12.00</span> ms (given)" in page
    written = json.loads((folder / "analysis" / "report.json").read_text())["warnings"]
    assert [ln.removeprefix("warning: ") for ln in r.stdout.splitlines()[1:]] == [w["text"] for w in written]


def test_a_spec_whose_rung_matches_none_is_said_not_dropped():
    from types import SimpleNamespace

    from hopbench.analysis.report.document import _spec_rungs

    a = SimpleNamespace(verdicts=[SimpleNamespace(rung="emu-1g")], groups=[],
                        spec=[{"folder": "s1", "rung": "emu-1g"}, {"folder": "s2", "rung": "lab-25g"}])
    (w,) = _spec_rungs(a)
    assert w["kind"] == "spec rung" and w["text"].startswith("s2: its rung 'lab-25g' is none of this result's (emu-1g)")


def test_the_report_path_imports_neither_scipy_nor_matplotlib(tmp_path):
    """Item 9: the report took 11 s on the default sweep, 4.5 s of it matplotlib's figures and
    1.5 s importing scipy.stats; its time is a benchmark's business (make bench-report: 2.3 s
    against the 3 s target), what is checked here is the cause: the page is built (figures
    included) without importing either."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    folder = shutil.copytree(root / "tests" / "golden" / "sweep-v1", tmp_path / "sweep")
    code = ("import sys; from pathlib import Path; from hopbench.analysis import commands as C; "
            "from hopbench.shape import load_shape; "
            f"p = C.write_report(Path({str(folder)!r}), load_shape(None)); "
            "print(p.stat().st_size, p.read_text().count('<svg'), "
            "sorted({m.split('.')[0] for m in sys.modules} & {'scipy', 'matplotlib'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=120)
    assert out.returncode == 0, out.stderr
    size, svgs, heavy = out.stdout.split(maxsplit=2)
    assert int(size) > 10_000 and int(svgs) >= 2 and heavy.strip() == "[]"
