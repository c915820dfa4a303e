"""The CLI end to end: CliRunner against a real server, and as a subprocess for the
one-line errors."""

import json
import math
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hopbench.cli import app
from hopbench.errors import ConfigError
from tests.conftest import cli, dead_port, serve_process

runner = CliRunner()


def test_run_via_cli_runner(server, tmp_path):
    out = tmp_path / "r"
    res = runner.invoke(app, ["run", "--peer", f"{server.host}:{server.port}", "--tokens", "1,3", "--bytes", "64,4096",
                              "--cycles", "30", "--warmup", "3", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "T3" in res.output and "184320" in res.output
    assert (out / "summary.csv").read_text().count("\n") == 5
    # the instrument's floor: same transport, 64 B, loopback, measured and recorded
    floor = json.loads((out / "report.json").read_text())["floor"]
    assert floor["transport"] == "tcp" and floor["request_bytes"] == 64 and floor["n"] == 30
    assert floor["p50_ci_lo_ns"] <= floor["p50_ns"] <= floor["p50_ci_hi_ns"]
    assert "instrument floor (tcp, 64 B on loopback" in res.output
    from hopbench.analysis.hops import instrument_floors

    assert instrument_floors(out) == {"tcp": floor["p50_ns"] / 1e6}


def test_run_json_is_one_document_on_stdout_and_a_report_page_follows(server, tmp_path):
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


@pytest.mark.slow  # over 5 s on a 2-core VM (REVIEW6 F10: the fast tier stays fast)
def test_every_options_help_is_shown_whole():
    """Issue 42: --payload-from's help lost "[tokens, layers, hidden]" to rich markup ("file of
    ;"). Every option of every command shows its whole help text."""
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
            if getattr(p, "param_type_name", None) == "option" and p.help and not p.hidden:  # an old spelling is hidden
                want = re.sub(r"\s+", " ", p.help.replace("\\[", "["))
                assert want in shown, (name, p.name, want)


def test_run_help_groups_its_flags():
    """Issue 42: `run --help` was 36 flags in one panel."""
    import typer.main

    from hopbench.cli import app

    run = typer.main.get_command(app).commands["run"]
    panels = {getattr(p, "rich_help_panel", None) for p in run.params
              if getattr(p, "param_type_name", "") == "option" and not p.hidden}  # an old spelling shows nowhere
    assert panels == {"Connection", "Payload", "Timing", "Load", "GPU", "Output", "Stream", "Drafter"}, panels


@pytest.mark.parametrize("why", ["dead port", "wrong secret"])
def test_a_run_that_never_connects_leaves_nothing_on_disk(tmp_path, why):
    srv = None
    if why == "dead port":
        peer = f"127.0.0.1:{dead_port()}"
    else:
        srv, port = serve_process(env={"HOPBENCH_SECRET": "right"})
        peer = f"127.0.0.1:{port}"
    try:
        r = cli("run", "--peer", peer, "--out", str(tmp_path / "x"), "--secret", "wrong")
    finally:
        if srv:
            srv.terminate()
            srv.wait(10)
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "kept in" not in lines[0], r.stderr
    assert not (tmp_path / "x").exists()


def test_ucx_falling_back_is_said_on_the_terminal(tmp_path):
    try:
        import ucxx  # noqa: F401
    except ImportError:
        pytest.skip("ucxx not installed")
    srv, port = serve_process()
    try:
        r = cli("run", "--peer", f"127.0.0.1:{port}", "--transport", "ucx", "--opt", "UCX_TLS=rc,tcp", "--tokens", "1",
               "--cycles", "10", "--warmup", "2", "--no-floor", "--out", str(tmp_path / "r"))
    finally:
        srv.terminate()
        srv.wait(10)
    assert r.returncode == 0, r.stderr
    if not Path("/sys/class/infiniband").exists():  # no RDMA device: UCX must have fallen back to tcp
        assert "warning: UCX_TLS=rc,tcp asked for rc, but UCX put only tcp on the lanes" in r.stderr


def test_ucx_without_the_device_asked_for_is_one_line_and_leaves_nothing(server, tmp_path):
    """Item 6: `run --transport ucx --opt UCX_TLS=rc` on a host without RDMA: a
    UCXXNoDeviceError traceback, the server held 10 s, an error folder left behind."""
    import pytest

    pytest.importorskip("ucxx")
    import glob

    if any(glob.glob("/sys/class/infiniband/*")):
        pytest.skip("this host has RDMA devices: UCX_TLS=rc would work")
    out = cli("run", "--peer", f"{server.host}:{server.port}", "--transport", "ucx", "--opt", "UCX_TLS=rc",
              "--tokens", "3", "--cycles", "5", "--results-dir", tmp_path / "results")
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert "UCX_TLS=rc" in line and "tcp" in line and "lanes it has here" in line
    assert not (tmp_path / "results").exists()


def test_iperf3_habits_port_and_a_duration(server, tmp_path):
    """Item 11: --port beside a bare --peer HOST, -t SECONDS instead of --cycles, -h, --version."""

    out = cli("run", "--peer", server.host, "--port", server.port, "--tokens", "1", "-t", "0.3",
              "--no-floor", "--results-dir", tmp_path)
    assert out.returncode == 0, out.stderr
    (rep,) = [json.loads(p.read_text()) for p in tmp_path.glob("*/report.json")]
    (p,) = rep["payloads"]
    n, probe = p["summary"]["n"], p["duration_probe"]
    assert rep["config"]["duration_s"] == 0.3 and n == p["plan"]["cycles"] != 1000
    # sized by the recorded probe (its median cycle time), not the 1,000 default; not a timing check:
    # the probe's cycles are warm-up, so the timed cycles may run faster or slower than it
    assert probe["cycles"] == 20 and probe["per_cycle_s"] == probe["p50_ns"] / 1e9 > 0
    assert n == max(10, min(probe["cap"], math.ceil(0.3 / probe["per_cycle_s"])))
    assert cli("-h").returncode == 0 and cli("--version").stdout.startswith("hopbench ")


def test_old_spellings_read_as_todays_options_with_one_note_each():
    """The old spellings (hopbench.cli.respell.OLD) are rewritten into the option that replaced
    them, merged with what that option already says, each with one note; said both ways, one
    line; a spelling that means nothing without its option is noted and dropped."""
    from hopbench.cli.respell import OLD, respell

    notes: list[str] = []
    run = OLD["run"]
    got = respell(["--peer", "h", "--rung", "lab", "--rate=100", "--stream", "layers", "--layers", "80",
                   "--forward-ms", "40", "--early", "fc", "--memory", "cuda", "--server-memory", "host",
                   "--gpu-path", "direct"], run, notes.append)
    assert dict(zip(got[::2], got[1::2])) == {"--peer": "h", "--link": "lab,rate=100", "--memory": "cuda:host,direct",
                                              "--stream": "layers:80,forward=40,early=fc"}
    assert len(notes) == 7 and all(n.startswith("note: ") and n.endswith("goes in the next release") for n in notes)
    assert respell(["--payload-from", "h.npy"], run, notes.append) == ["--payload", "taps,from=h.npy"]
    assert respell(["--arrivals", "poisson"], run, notes.append) == []  # closed loop: nothing to schedule
    assert respell(["--mps", "500", "--arrivals", "poisson"], run, notes.append) == ["--mps", "500:poisson"]
    for args in (["--stream", "layers,forward=40", "--forward-ms", "30"], ["--link", "lab", "--rung", "x"],
                 ["--memory", "cuda:host", "--server-memory", "cuda"]):
        with pytest.raises(ConfigError, match="both set it: give it once"):
            respell(args, run, notes.append)
    assert respell(["--verify", "sleep:7"], OLD["spec"], notes.append) == ["--verify-work", "sleep:7"]
    assert respell(["--", "--rung", "x"], run, notes.append) == ["--", "--rung", "x"]  # not an option after --


def test_no_old_spelling_is_an_option_of_its_command():
    """An old spelling lives in the table only: its command declares today's option, never it."""
    import typer.main

    from hopbench.cli.respell import OLD

    group = typer.main.get_command(app)
    for name, olds in OLD.items():
        flags = {f for p in group.commands[name].params for f in getattr(p, "opts", ())}
        assert not {o.flag for o in olds} & flags and {o.new for o in olds} <= flags, name
