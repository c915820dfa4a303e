"""The installed version: a leaf module (every room may import it without importing the package's
root, whose lazy `hopbench.load` reaches into analysis)."""

__version__ = "0.1.0"
