"""docs/ARCHITECTURE.md kept true by test: every source file of the
measuring core and of the transports is named in its room list, the count of hopbench's own
transports is the registry's, every serving path and client path class is named."""

import re

from tests.conftest import ROOT

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
    import pkgutil
    from importlib import import_module

    from hopbench.core import client_paths, kinds, serving

    def paths(module, base):
        return [c for c in vars(module).values() if isinstance(c, type) and issubclass(c, base) and c is not base
                and not c.__name__.startswith("_") and c.__module__ == module.__name__ and c.name != "?"]

    rooms = [import_module(f"hopbench.core.kinds.{m.name}") for m in pkgutil.iter_modules(kinds.__path__)]
    found = [c for room in rooms for c in paths(room, serving.ServingPath) + paths(room, client_paths.ClientPath)]
    assert len(found) >= 16, found  # every kind's two ends, in its own room
    for c in found:
        room = re.sub(r"\s+", " ", DOC.lower())  # the room list wraps lines
        assert c.name.lower() in room, (c.__name__, c.name)  # the kind's own name, as the room list spells it


def test_the_testing_packages_example_runs():
    """hopbench.testing's example (how to test a new transport) runs as written."""
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


def test_module_docstrings_name_every_public_class_they_hold():
    """A module docstring that describes its classes names each public one (a class
    added without its line in the docstring fails here)."""
    import ast

    for name in ("serving", "client_paths", "busy", "timing"):
        tree = ast.parse((ROOT / "hopbench" / "core" / f"{name}.py").read_text())
        doc = ast.get_docstring(tree) or ""
        public = [n.name for n in tree.body if isinstance(n, ast.ClassDef) and not n.name.startswith("_")]
        missing = [c for c in public if not re.search(rf"\b{c}\b", doc)]
        assert not missing, (name, missing)


def test_the_transports_import_claim_is_the_allow_list():
    """The sentence "Transports import only ..." names exactly the modules
    tests/test_architecture.py allows a transport to import."""
    from test_architecture import TRANSPORT_IMPORTS

    claim = re.search(r"Transports import only (.*?): an allow-list", DOC, re.S)
    assert claim, "ARCHITECTURE.md lost its transports-import sentence"
    assert set(re.findall(r"`(hopbench\.[\w.]+)`", claim[1])) == TRANSPORT_IMPORTS


def test_no_default_of_the_records_is_restated():
    """A timeout, a hidden width or a frame size that records.py defines is not
    restated as a literal default elsewhere (a parameter or a field of that name uses the
    records' constant)."""
    import ast

    from hopbench import records as R

    values = {R.TIMEOUT_S, R.CONNECT_TIMEOUT_S, R.HIDDEN_DEFAULT, R.MSS, R.WIRE_FRAME}
    named = re.compile(r"timeout|wait_s|^width$|^hidden$")
    found = []
    for p in sorted((ROOT / "hopbench").rglob("*.py")):
        if p.name == "records.py":
            continue
        for n in ast.walk(ast.parse(p.read_text())):
            pairs: list = []
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
                a = n.args
                pos = a.posonlyargs + a.args
                pairs = list(zip([x.arg for x in pos[len(pos) - len(a.defaults):]], a.defaults))
                pairs += [(x.arg, d) for x, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
            elif isinstance(n, ast.AnnAssign) and n.value is not None and isinstance(n.target, ast.Name):
                pairs = [(n.target.id, n.value)]
            found += [f"{p.relative_to(ROOT)}:{d.lineno} {k}={d.value}" for k, d in pairs
                      if named.search(k) and isinstance(d, ast.Constant) and d.value in values]
    assert not found, found
    assert "MSS, WIRE_FRAME = " not in "".join(p.read_text() for p in (ROOT / "hopbench").rglob("*.py")
                                               if p.name != "records.py")


def test_docs_link_only_inside_the_repository():
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = md.read_text()
        assert "../shared" not in text and "shared/seeds" not in text, md
        for target in re.findall(r"\]\(([^)#:]+)\)", text):  # markdown links to files
            assert (md.parent / target).exists(), (md, target)


#: dotted strings that are names of something other than a module or attribute: the PyCapsule a
#: transport's native endpoint travels in (hopbench.core.transport.NativeEndpoint)
NOT_MODULES = {"hopbench.endpoint"}


def _resolves(name: str) -> bool:
    import importlib

    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for p in parts[i:]:
                obj = getattr(obj, p)
        except AttributeError:
            return False
        return True
    return False


def test_every_dotted_name_in_the_code_and_docs_is_a_real_module_or_attribute():
    """Every `hopbench.x[.y]` written in hopbench/, docs/ and benchmarks/ imports, but the
    record schemas' names (results.DOCUMENTS) and file names."""
    from hopbench import results as R

    schemas = {v[0] for v in R.DOCUMENTS.values()} | {
        getattr(R, n) for n in dir(R) if n.endswith("_SCHEMA") and isinstance(getattr(R, n), str)}
    bad: dict[str, set[str]] = {}
    for root in ("hopbench", "docs", "benchmarks"):
        for f in (ROOT / root).rglob("*"):
            if f.suffix not in (".py", ".md"):
                continue
            for m in re.finditer(r"\bhopbench(?:\.[A-Za-z_]\w*)+", f.read_text(errors="ignore")):
                name = m.group(0)
                if name in schemas or name in NOT_MODULES or name.endswith((".py", ".md", ".toml", ".json")):
                    continue
                if not _resolves(name):
                    bad.setdefault(name, set()).add(str(f.relative_to(ROOT)))
    assert not bad, bad
