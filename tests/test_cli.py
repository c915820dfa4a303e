"""The CLI end to end: CliRunner against a real server, and as a subprocess for the
one-line errors."""

import socket
import subprocess
import sys

from typer.testing import CliRunner

from hopbench.cli import app
from tests.conftest import dead_port

runner = CliRunner()


def test_run_via_cli_runner(server, tmp_path):
    out = tmp_path / "r"
    res = runner.invoke(app, ["run", "--peer", f"{server.host}:{server.port}", "--tokens", "1,3", "--bytes", "64,4096",
                              "--cycles", "30", "--warmup", "3", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "T3" in res.output and "184320" in res.output
    assert (out / "summary.csv").read_text().count("\n") == 5
    # the instrument's floor: same transport, 64 B, loopback, measured and recorded
    import json

    floor = json.loads((out / "report.json").read_text())["floor"]
    assert floor["transport"] == "tcp" and floor["request_bytes"] == 64 and floor["n"] == 30
    assert floor["p50_ci_lo_ns"] <= floor["p50_ns"] <= floor["p50_ci_hi_ns"]
    assert "instrument floor (tcp, 64 B on loopback" in res.output
    from hopbench.analysis.hops import instrument_floors

    assert instrument_floors(out) == {"tcp": floor["p50_ns"] / 1e6}


def test_run_json_is_one_document_on_stdout_and_a_report_page_follows(server, tmp_path):
    import json

    out = tmp_path / "r"
    r = subprocess.run([sys.executable, "-m", "hopbench", "run", "--peer", f"{server.host}:{server.port}", "--tokens",
                        "1,3", "--cycles", "20", "--warmup", "2", "--no-floor", "--out", str(out), "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # nothing else on stdout: the table went to stderr
    assert doc["schema"] == "hopbench.run-result" and doc["folder"] == str(out)
    assert doc["report"] == json.loads((out / "report.json").read_text())
    assert [p["payload"] for p in doc["report"]["payloads"]] == ["T1", "T3"] and "p50 us" in r.stderr
    assert len(doc["report"]["result_id"]) == 32
    rep = subprocess.run([sys.executable, "-m", "hopbench", "report", str(out)], capture_output=True, text=True,
                         timeout=180)
    assert rep.returncode == 0, rep.stderr
    assert (out / "report.html").stat().st_size > 10_000


def test_existing_result_folder_is_never_overwritten(server, tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    r = subprocess.run([sys.executable, "-m", "hopbench", "run", "--peer", f"{server.host}:{server.port}", "--out", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "refusing to overwrite" in r.stderr
    assert (out / "keep.txt").read_text() == "precious"


def one_line_error(args):
    r = subprocess.run([sys.executable, "-m", "hopbench", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("hopbench: error:"), r.stderr
    return lines[0]


def test_unreachable_peer_one_line(tmp_path):
    line = one_line_error(["run", "--peer", f"127.0.0.1:{dead_port()}", "--out", str(tmp_path / "x")])
    assert "cannot reach" in line


def test_port_in_use_one_line():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    try:
        assert "port in use" in one_line_error(["serve", "--bind", f"127.0.0.1:{s.getsockname()[1]}"])
    finally:
        s.close()


def test_over_cap_plan_one_line(server_factory, tmp_path):
    from hopbench.core import protocol as P

    st = server_factory(caps=P.Caps(max_request_bytes=100_000))
    line = one_line_error(["run", "--peer", f"{st.host}:{st.port}", "--tokens", "3", "--out", str(tmp_path / "x")])
    assert "exceeds the server cap" in line


def test_bad_config_key_one_line(tmp_path):
    bad = tmp_path / "shape.toml"
    bad.write_text('[model]\nname="x"\naux_layers=[1]\nhidden=1\ndtype="bf16"\ncolour=1\n[draft]\nk=2\nid_dtype="int32"\n'
                   '[grid]\ntokens=[1]\nbytes_min=64\nbytes_max=128\nbytes_points=2\n'
                   '[decode]\nt_draft_ms=1\ncycle_ms=2\ntok_s=3\noperating_tokens=3\n')
    line = one_line_error(["run", "--peer", "127.0.0.1:1", "--shape", str(bad)])
    assert "colour" in line and str(bad) in line


def test_transports_lists_the_registry_and_not_the_test_transport():
    """A fresh process: the product registry (entry points) has tcp, zmq and ucx; the tests'
    in-memory `fake` is registered only inside the test process."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "hopbench", "transports"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for name in ("tcp", "zmq", "ucx"):
        assert name in out.stdout
    assert "fake" not in out.stdout


def test_verdict_from_given_hops():
    res = runner.invoke(app, ["verdict", "--hop-ms", "roce=0.198,1gbe=1.713,100mb=16.02"])
    assert res.exit_code == 0
    assert "28.58" in res.output and "dead heat" in res.output and "t_draft = 15.88" in res.output


def test_missing_extra_names_the_install_line(tmp_path):
    # pyzmq made unimportable in a child process: the client must name the extra to install
    code = ("import sys; sys.modules['zmq'] = None; from hopbench.cli import main; "
            "sys.argv = ['hopbench', 'transports']; main()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "zmq    missing    pip install 'hopbench[zmq]'" in r.stdout
    code = ("import sys; sys.modules['zmq'] = None; from hopbench.cli import main; "
            f"sys.argv = ['hopbench', 'run', '--peer', '127.0.0.1:1', '--transport', 'zmq', '--out', '{tmp_path / 'x'}']; main()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "install it with: pip install 'hopbench[zmq]'" in r.stderr
    assert len([ln for ln in r.stderr.splitlines() if ln.strip()]) == 1


def test_every_options_help_is_shown_whole():
    """Issue 42: --payload-from's help lost "[tokens, layers, hidden]" to rich markup ("file of
    ;"). Every option of every command shows its whole help text."""
    import os
    import re
    import subprocess
    import sys

    import typer.main

    from hopbench.cli import app

    group = typer.main.get_command(app)
    env = {**os.environ, "COLUMNS": "400", "TERM": "xterm"}
    for name, cmd in group.commands.items():  # as a terminal shows it: through rich, its markup parsed
        out = subprocess.run([sys.executable, "-m", "hopbench", name, "--help"], capture_output=True, text=True,
                             env=env, timeout=60).stdout
        shown = re.sub(r"[\s│]+", " ", out)
        for p in cmd.params:
            if getattr(p, "param_type_name", None) == "option" and p.help:  # typer's own Option class
                want = re.sub(r"\s+", " ", p.help.replace("\\[", "["))
                assert want in shown, (name, p.name, want)


def test_run_help_groups_its_flags():
    """Issue 42: `run --help` was 36 flags in one panel."""
    import typer.main

    from hopbench.cli import app

    run = typer.main.get_command(app).commands["run"]
    panels = {getattr(p, "rich_help_panel", None) for p in run.params if getattr(p, "param_type_name", "") == "option"}
    assert panels == {"Connection", "Payload", "Timing", "Load", "GPU", "Output", "Stream", "Drafter"}, panels
