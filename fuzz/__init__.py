"""Coverage-guided fuzzing of everything hopbench parses from outside (atheris): targets in
fuzz/targets.py, seeds in fuzz/seeds.py, the driver fuzz/run.py (`make fuzz`)."""
