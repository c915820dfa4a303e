"""The configs shipped with hopbench (installed as hopbench.configs, read with importlib.resources).
A config given on the command line, or found under ./configs/ in the current directory, wins."""
