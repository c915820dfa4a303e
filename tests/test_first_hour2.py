"""Issue 28 (the first hour, second pass): each item a user hit, as a test."""

from hopbench.analysis.data import Group
from hopbench.analysis.plot import cdf_tokens


def _g(tokens, samples=True, gap=0.0):
    import numpy as np

    g = Group("r", "tcp", f"T{tokens}", tokens, tokens * 61440, 8, gap, None)
    if samples:
        g.samples.append(np.arange(1, 11, dtype=np.int64))
    return g


def test_cdfs_show_the_measured_token_counts_not_a_fixed_list():
    """Item 10: the CDFs were hard-coded to T = 1, 3, 8, so a T = 2 run drew nothing."""
    assert cdf_tokens([_g(2)]) == [2]
    assert cdf_tokens([_g(t) for t in (1, 2, 3)]) == [1, 2, 3]
    picked = cdf_tokens([_g(t) for t in range(1, 9)])
    assert len(picked) == 4 and picked[0] == 1 and picked[-1] == 8
    assert cdf_tokens([_g(3, gap=80.0), _g(5, samples=False)]) == []
