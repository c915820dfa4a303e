"""hopbench: what does one speculative-decoding network hop cost on this link?"""

from hopbench.version import __version__

__all__ = ["__version__", "load"]


def load(path, bytes_per_token: int | None = None, operating_tokens: int | None = None):  # noqa: ANN001 (any path-like)
    """Tidy pandas DataFrames (cycles, cells, fits) of a run or sweep folder; needs the
    analysis extra (hopbench.analysis.frames). The shape is the one recorded with the
    result; bytes_per_token/operating_tokens (else configs/shape.toml) only where it has none."""
    from hopbench.analysis.frames import load as _load

    return _load(path, bytes_per_token, operating_tokens)
