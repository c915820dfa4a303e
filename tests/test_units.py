"""Unit tests: shape math, statistics against known distributions, protocol pack/unpack,
the timing loop with a fake transport and a fake clock."""

import dataclasses
import os
import re
import shutil
import struct

import numpy as np
import pytest

from hopbench.analysis import data as D
from hopbench.core import protocol as P
from hopbench.core.timing import Progress, run_cycles
from hopbench.errors import ConfigError, PeerClosed, ProtocolError, VerifyError
from hopbench.estimate import median_interval, ranks_for_level
from hopbench.orchestration.stats import summarize
from hopbench.shape import load_shape, log_grid
from hopbench.testing import FakeClock
from hopbench.testing import fake_transport as fake
from tests.conftest import GOLDEN


def test_shape_from_config():
    cfg = load_shape()
    sh = cfg.shape
    assert sh.bytes_per_token == 5 * 6144 * 2 == 61440
    assert sh.request_bytes(3) == 184320
    assert sh.reply_bytes() == 8  # K=2 int32
    assert sh.reply_bytes(4) == 16
    assert cfg.tokens == (1, 2, 3)


def test_shape_bad_key_names_key_and_file(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text((load_shape().path and open(load_shape().path).read()).replace("hidden = 6144", "hiden = 6144"))
    with pytest.raises(ConfigError) as ei:
        load_shape(p)
    assert "hiden" in str(ei.value) and str(p) in str(ei.value)


def test_log_grid_spans_and_is_log_spaced():
    g = log_grid(64, 4 * 1024 * 1024, 17)
    assert g[0] == 64 and g[-1] == 4 * 1024 * 1024 and len(g) == 17
    ratios = np.diff(np.log(g))
    assert np.allclose(ratios, ratios.mean(), rtol=1e-3)


@pytest.mark.parametrize("n,lo,hi", [(10, 1, 8), (20, 5, 14), (100, 39, 60)])
def test_median_ci_ranks_match_tables(n, lo, hi):
    # reference ranks from the binomial tables (e.g. Conover, Practical Nonparametric Statistics)
    assert ranks_for_level(n)[:2] == (lo, hi)


def test_median_ci_coverage_on_skewed_distribution():
    rng = np.random.default_rng(1)
    true_median = np.log(2)  # exponential(1)
    hits = 0
    trials = 400
    for _ in range(trials):
        x = np.sort(rng.exponential(1.0, 200))
        lo, hi, _ = median_interval(x)
        hits += lo <= true_median <= hi
    assert 0.92 <= hits / trials <= 0.99


def test_summary_percentiles_and_drift():
    rng = np.random.default_rng(2)
    x = rng.normal(100_000, 1_000, 3000).astype(np.int64)
    s = summarize(x)
    assert s["n"] == 3000
    assert s["p50_ns"] == pytest.approx(np.percentile(x, 50))
    assert s["min_ns"] <= s["p50_ci_lo_ns"] <= s["p50_ns"] <= s["p50_ci_hi_ns"] <= s["max_ns"]
    assert not s["drift"]
    ramp = (x * np.linspace(1.0, 1.3, 3000)).astype(np.int64)  # the seeds' "still warming"
    r = summarize(ramp)
    assert r["drift"] and r["drift_rel"] > 0.1


def test_header_roundtrip_and_rejections():
    h = P.pack_header(P.PLAN, 123)
    assert len(h) == 16 and P.unpack_header(h) == (P.PLAN, 123)
    with pytest.raises(ProtocolError, match="bad magic"):
        P.unpack_header(b"GET / HTTP/1.1\r\n")
    with pytest.raises(ProtocolError, match="version"):
        P.unpack_header(struct.pack("<4sHHII", b"HOPB", 99, 1, 0, 0))
    with pytest.raises(ProtocolError, match="exceeds"):
        P.unpack_header(struct.pack("<4sHHII", b"HOPB", P.VERSION, 1, 10**9, 0))
    with pytest.raises(ProtocolError, match="unknown message type"):
        P.unpack_header(struct.pack("<4sHHII", b"HOPB", P.VERSION, 77, 0, 0))


def test_plan_wire_roundtrip_and_validation():
    plan = P.Plan("tcp", 184320, 8, 2, 4, 100, 10, verify=True, payload_crc32=5)
    assert P.Plan.from_wire(P.decode_body(P.encode_body(plan.to_wire()))) == P.Plan(
        "tcp", 184320, 8, 2, 4, 100, 10, verify=True, payload_crc32=5, transport_settings={})
    bad = plan.to_wire() | {"cycles": -1}
    with pytest.raises(ProtocolError, match="cycles"):
        P.Plan.from_wire(bad)
    with pytest.raises(ProtocolError):
        P.decode_body(b"\xff\xfe")


def test_caps():
    caps = P.Caps(max_request_bytes=1000, max_cycles=100)
    assert caps.check(P.Plan("tcp", 1000, 8, 2, 4, 50, 5)) is None
    assert "exceeds the server cap" in caps.check(P.Plan("tcp", 1001, 8, 2, 4, 50, 5))
    assert "sequence header" in caps.check(P.Plan("tcp", 4, 8, 2, 4, 50, 5))
    assert "cannot hold" in caps.check(P.Plan("tcp", 100, 4, 2, 4, 50, 5))
    assert "round trips" in caps.check(P.Plan("tcp", 100, 8, 2, 4, 99, 5))


@pytest.mark.parametrize("k,id_bytes", [(2, 4), (1, 2), (5, 8), (3, 2)])
def test_codec_fast_and_slow_paths_agree(k, id_bytes):
    c = P.ReplyIds(k, id_bytes)
    buf = bytearray(k * id_bytes + 3)
    pack, check = c.packer(buf), c.checker(buf)
    wrap_seq = (c.mask + 1) // k  # seqs around the id wrap-around
    for seq in [0, 1, 7, 1000, wrap_seq - 1, wrap_seq, wrap_seq + 1]:
        pack(seq)
        assert struct.unpack_from(c.struct.format, buf) == c.expected(seq)
        check(seq)
        with pytest.raises(VerifyError):
            check(seq + 1)


def test_codec_reports_server_checksum_signal():
    c = P.ReplyIds(2, 4)
    buf = bytearray(8)
    c.pack(buf, 9, corrupt=True)
    with pytest.raises(VerifyError, match="checksum"):
        c.checker(buf)(9)


def echo_ids(peer, request_bytes, reply_bytes, codec, cycles, stale_at=None):
    req, rep = bytearray(request_bytes), bytearray(reply_bytes)
    for _ in range(cycles):
        try:
            peer.recv_into(req)
        except PeerClosed:
            return
        seq = P.SEQ.unpack_from(req)[0]
        codec.pack(rep, seq - 1 if seq == stale_at else seq)
        peer.send(rep)


def test_the_two_loops_against_each_other_with_one_clock_read_pair_per_cycle():
    """The client's loop against the server's echo loop (the real one) over the fake
    transport: exactly two clock reads per cycle on the client, none on the server."""
    import threading

    from hopbench.core.timing import echo_cycles

    a, b = fake.pair()
    codec = P.ReplyIds(2, 4)
    served = {}

    def server():
        served["n"] = echo_cycles(b, bytearray(64), bytearray(8), codec, 10, on_bad_seq=lambda seq: None)

    t = threading.Thread(target=server)
    t.start()
    samples = np.zeros(10, dtype=np.int64)
    clock = FakeClock(500)
    n = run_cycles(a, bytearray(64), bytearray(8), codec, samples, clock=clock)
    t.join()
    assert n == 10 and served["n"] == 10
    assert (samples == 500).all() and clock.reads == 20  # one clock pair per cycle, nothing else timed


def test_timing_loop_rejects_stale_reply_and_keeps_prior_samples():
    import threading

    a, b = fake.pair()
    codec = P.ReplyIds(2, 4)
    t = threading.Thread(target=echo_ids, args=(b, 64, 8, codec, 5, 3))
    t.start()
    samples = np.zeros(10, dtype=np.int64)
    progress = Progress()
    with pytest.raises(VerifyError, match="seq 3"):
        run_cycles(a, bytearray(64), bytearray(8), codec, samples, clock=FakeClock(7), progress=progress)
    a.close()
    t.join()
    assert progress.done == 3
    assert list(samples[:4]) == [7, 7, 7, 0]  # the stale reply never became a sample


def test_timing_loop_peer_close_mid_run():
    a, b = fake.pair()
    b.close()
    samples = np.zeros(3, dtype=np.int64)
    progress = Progress(done=-1)
    with pytest.raises(PeerClosed):
        run_cycles(a, bytearray(64), bytearray(8), P.ReplyIds(2, 4), samples, progress=progress)
    assert progress.done == 0


def test_lanes_that_bypass_the_network_are_found_in_the_recorded_strings():
    """Issue 42: UCX's own lane lines, as ucx and nixl record them."""
    from hopbench.lanes import bypass

    nixl_ns = ["self cfg#0 rma_am(tcp/lo)  amo_am(tcp/lo)  am(tcp/lo cma/memory)  ka(tcp/lo)",
               "intra-node cfg#1 rma_am(tcp/hb1b)  amo_am(tcp/hb1b)  am(tcp/hb1b cma/memory)  ka(tcp/hb1b)"]
    assert bypass(nixl_ns) == ["cma"]
    assert bypass(["intra-node tag(posix/memory cma/memory sysv/memory)"]) == ["cma", "posix", "sysv"]
    assert bypass(["intra-node tag(tcp/lo)", "inter-node cfg#1 am(tcp/eth0)"]) == []
    assert bypass([nixl_ns[0]]) == []  # the agent's endpoint to itself is not the hop
    assert bypass(None) == [] and bypass([3, None]) == []


def test_a_table_fits_the_terminal_it_is_printed_on(monkeypatch):
    """Issue 42: the verdict table ran 200-250 columns wide on a terminal. On one it fits the
    terminal's width (text columns wrap, numbers whole); in a pipe it keeps one row per line."""

    from hopbench.analysis.tables import render

    cols = ["rung", "transport", "hop ms", "gain", "call"]
    rows = [["emu-100m", "tcp", "16.020", "+0.2%", "not worth it (+0.2% < 5%): the whole 95% interval below the bar"]]
    monkeypatch.setattr(shutil, "get_terminal_size", lambda fallback=None: os.terminal_size((60, 24)))

    shown = re.sub(r"\x1b\[[0-9;]*m", "", render(cols, rows, right={2, 3}, call_column=4, terminal=True))
    assert max(len(line) for line in shown.splitlines()) <= 60 and "16.020" in shown and "+0.2%" in shown
    piped = render(cols, rows, right={2, 3}, call_column=4, terminal=False)
    assert len(piped.splitlines()) == 2  # the header and the one row
    # the call's colour is the caller's decision (its tone), never read back from the text
    assert "\x1b[33m" in render(cols, rows, call_column=4, terminal=True, tones=["even"])
    assert "\x1b[3" not in render(cols, rows, call_column=4, terminal=True, tones=[None]).split("\n", 1)[1]


def test_an_interrupt_during_a_write_waits_for_it(tmp_path, monkeypatch):
    """Issue 42: Ctrl-C between a result file's temporary copy and its rename left a .tmp in an
    interrupted run --clients. SIGINT and SIGTERM now wait for the write, then arrive."""
    import signal

    from hopbench import results as R

    path = tmp_path / "summary.csv"
    path.write_text("old\n")
    real_fsync = os.fsync

    def interrupted_fsync(fd):
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C in the middle of the write
        real_fsync(fd)

    monkeypatch.setattr(R.os, "fsync", interrupted_fsync)
    kept = signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as a fresh process has it
    try:
        with pytest.raises(KeyboardInterrupt):
            R.atomic_write(path, "new\n")
    finally:
        signal.signal(signal.SIGINT, kept)
    assert path.read_text() == "new\n" and not list(tmp_path.glob("*.tmp"))


def test_the_spinner_yields_only_when_the_peer_may_share_the_cpu(monkeypatch):
    """core.transport.Spinner, every transport's busy-poll policy: a yield every 8 spins
    when share_cpu, none otherwise; the caller's check every check_every spins."""

    from hopbench.core.transport import Spinner

    yields = []
    monkeypatch.setattr(os, "sched_yield", lambda: yields.append(1))
    shared, alone = Spinner(True, check_every=16), Spinner(False, check_every=16)
    checks = [shared.spun() for _ in range(64)]
    assert len(yields) == 8 and checks.count(True) == 4 and checks[15] and not checks[14]
    assert [alone.spun() for _ in range(64)].count(True) == 4 and len(yields) == 8
    with pytest.raises(ValueError):
        Spinner(True, check_every=100)


def test_an_exception_map_picks_the_most_specific_class():
    """core.transport.most_specific (httpx's rule): a subclass's own entry wins over its base's,
    whatever the table's order; an unnamed class falls back along its hierarchy, then to the default."""
    from hopbench.core.transport import most_specific

    class Base(Exception):
        pass

    class Child(Base):
        pass

    class Grandchild(Child):
        pass

    table = {Base: "base", Child: "child"}  # the base first: first-match-in-order said "base" for a Child
    assert most_specific(table, Child(), "none") == "child"
    assert most_specific(table, Grandchild(), "none") == "child" and most_specific(table, Base(), "none") == "base"
    assert most_specific(table, ValueError(), "none") == "none"


def test_an_emulated_link_is_used_only_once_it_is_running(monkeypatch):
    """netem waits for each veth's running flag (the kernel's link watch sets it up to a second
    after the carrier; UCX made its device list before it and could not use the link): it polls
    the flag and returns once it is up, and a link that never runs is one line, bounded."""
    from types import SimpleNamespace

    from hopbench.orchestration import netem

    states = iter(["<BROADCAST,MULTICAST,UP> mtu 1500 qdisc noop state LOWERLAYERDOWN",
                   "<BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc tbf state DORMANT",
                   "<BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc tbf state UP mode DEFAULT"])
    calls = []

    def fake(cmd, check=True):
        calls.append(cmd)
        return SimpleNamespace(stdout=f"3: hb1x0a@if2: {next(states)} group default\n")

    monkeypatch.setattr(netem, "_run", fake)
    netem._wait_running("hb1x0s", "hb1x0a")
    assert len(calls) == 3 and calls[0][:3] == ["ip", "-n", "hb1x0s"]
    monkeypatch.setattr(netem, "_run", lambda cmd, check=True: SimpleNamespace(stdout="3: x: <UP> state DOWN\n"))
    monkeypatch.setattr(netem, "RUNNING_WAIT_S", 0.05)
    with pytest.raises(netem.NetnsUnavailable, match="not running after 0.05 s"):
        netem._wait_running("hb1x0s", "hb1x0a")


def test_identity_is_typed_from_plan_to_reading(tmp_path):
    """Issue 39 (REVIEW4 §5.4): a cell's identity is built once and carried typed; a golden
    v1 folder (flat sweep cells, no place record) and a fresh plan both read back as
    records.Series/Place, and the labels are spelled from them, never parsed back."""
    from dataclasses import asdict

    from hopbench.analysis.data import cell_of
    from hopbench.config_sweep import load_rung, load_sweep
    from hopbench.orchestration.sweep.plan import plan_cells
    from hopbench.records import Place, Series
    from hopbench.shape import load_shape

    groups, _ = D.load_groups(GOLDEN / "sweep-v1")
    assert {g.series for g in groups} == {Series("tcp")} and {g.place.rung for g in groups} == {"loopback"}
    s = Series("tcp", "fp8", "projected", "layers", 4)
    assert s.label == "tcp+fp8#projected~layers@4" and s.spell("T3") == "T3+fp8#projected~layers@4"
    assert s.raw.alone.label == "tcp#projected~layers" and Series.from_dict(asdict(s)) == s
    p = Place("emu-1g", "split", 80.0)
    assert p.label == "emu-1g@split +80 ms gap" and Place.from_dict(asdict(p)) == p and p.unhurried.label == "emu-1g@split"
    # a planned cell, recorded as a sweep records it, reads back to the same identity
    cfg = dataclasses.replace(load_sweep("configs/sweep.toml", quick=True), codecs=("none", "int8"), clients=(1, 2))
    cells = plan_cells(cfg, [load_rung("loopback")], load_shape().shape, 1, ["split-busy", "same-block"])
    for c in cells[:40]:
        run = {"rung": c.label, "sweep": {"cell": asdict(c)}}
        plan = {"transport": c.series.transport, "codec": c.series.codec, "gap_ms": c.gap_ms,
                "request_bytes": c.request_bytes, "reply_bytes": c.reply_bytes,
                "group": {"size": c.series.clients} if c.series.clients > 1 else None}
        key = cell_of(run, {"plan": plan, "payload": c.payload, "tokens": c.tokens, "design": c.series.design})
        assert (key.place, key.series, key.payload) == (c.place, c.series, c.payload)


def test_a_drift_note_is_explained_once_in_the_legend():
    """Issue 62 item 10: a row's 'drift -92.7%' had no word of what drifted."""
    from hopbench.orchestration.runjob import RunConsole

    said: list[str] = []
    con = RunConsole(said.append, said.append)
    row = {"payload": "T3", "request_bytes": 184320, "reply_bytes": 8, "n": 100, "p50_ns": 1e5, "p50_ci_lo_ns": 9e4,
           "p50_ci_hi_ns": 1.1e5, "p50_ci_level": 0.95, "p99_ns": 2e5, "drift": True, "drift_rel": -0.927}
    con.row(row)
    con.row({**row, "payload": "T1", "drift": False})
    con.end("f", "tcp", None)
    assert "drift -92.7%" in said[0]
    legend = [line for line in said if line.startswith("drift X% (T3)")]
    assert len(legend) == 1 and "last third" in legend[0] and "first third" in legend[0]


def test_a_plain_hop_is_said_against_its_wire_time_at_the_rate():
    """Issue 62 item 11: T3 at 3.858 ms against a 1.566 ms wire time at 1 Gbit said nothing."""
    from hopbench.orchestration.runjob import RunConsole, wire_lines

    said, warned = [], []
    row = {"payload": "T3", "request_bytes": 184320, "reply_bytes": 8, "n": 100}
    wire_lines(1000, [{**row, "p50_ns": 3.858e6}, {**row, "payload": "T1", "request_bytes": 61440, "p50_ns": 0.6e6},
                      {**row, "payload": "T9", "p50_ns": 0.03e6}], RunConsole(said.append, warned.append))
    assert len(warned) == 2 and "T3: hop p50 3.858 ms (n = 100) against its wire time 1.568 ms" in warned[0]
    assert "(2.46x): more than 1.5x" in warned[0] and "faster than the rate allows" in warned[1]
    assert said == ["T1: hop p50 0.600 ms (n = 100) against its wire time 0.523 ms at 1000 Mbit/s (1.15x)"]
