"""docs/ARCHITECTURE.md kept true by test (issue 39, REVIEW4 §5.5): every source file of the
measuring core and of the transports is named in its room list, the count of hopbench's own
transports is the registry's, every serving path and client path class is named."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}


def test_every_core_and_transport_file_is_in_the_room_list():
    missing = [str(p.relative_to(ROOT)) for top in ("hopbench/core", "transports")
               for p in sorted((ROOT / top).rglob("*"))
               if p.suffix in (".py", ".c", ".h") and p.name != "__init__.py" and "__pycache__" not in p.parts
               and (p.name if p.parent == ROOT / top else f"{p.parent.name}/{p.name}") not in DOC]
    assert not missing, f"docs/ARCHITECTURE.md does not name: {missing}"


def test_the_doc_counts_hopbench_own_transports_as_the_registry_does():
    from importlib.metadata import entry_points

    own = {e.name for e in entry_points(group="hopbench.transports") if e.value.startswith("hopbench.transports")}
    word = WORDS[len(own)]
    assert f"hopbench's own {word}" in DOC, (own, word)
    others = [w for n, w in WORDS.items() if n != len(own) and f"hopbench's own {w}" in DOC]
    assert not others, others
    assert not re.search(r"own three|tcp, zmq, ucx:", DOC)


def test_every_serving_and_client_path_is_named():
    from hopbench.core import client_paths, serving

    def kinds(module, base):
        return [c for c in vars(module).values() if isinstance(c, type) and issubclass(c, base) and c is not base
                and not c.__name__.startswith("_")]

    for c in kinds(serving, serving.ServingPath) + kinds(client_paths, client_paths.ClientPath):
        room = re.sub(r"\s+", " ", DOC.lower())  # the room list wraps lines
        assert c.name.lower() in room, (c.__name__, c.name)  # the kind's own name, as the room list spells it


def test_the_testing_packages_example_runs():
    """REVIEW4 §2.7: its example raised AttributeError for someone adding a transport."""
    import hopbench.testing as T
    from hopbench.testing import conformance

    example = T.__doc__.split("::")[-1] if "::" in T.__doc__ else T.__doc__
    code = "\n".join(line[4:] for line in example.splitlines() if line.startswith("    "))
    name = T.register_fake()
    skipped = (conformance.check_length_mismatch_is_protocol_error, conformance.check_send_timeout)
    conformance.CHECKS, saved = [c for c in conformance.CHECKS if c not in skipped], conformance.CHECKS
    conformance.LOOP_CHECKS, saved_loops = conformance.LOOP_CHECKS[:1], conformance.LOOP_CHECKS
    try:
        exec(code.replace('"mytransport"', repr(name)), {})
    finally:
        conformance.CHECKS, conformance.LOOP_CHECKS = saved, saved_loops
