"""hopbench: what does one speculative-decoding network hop cost on this link?"""

__version__ = "0.1.0"
