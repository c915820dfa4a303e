"""The structural rules that a linter does not express, checked over the source: each test
states the rule it keeps (docs/ARCHITECTURE.md gives the reasons)."""

import ast
import collections
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# a file of the layout named as a path: the name alone or at the end of a glob or path string
# ("report.json", "*/sweep.json"), the cells glob, the set-aside rule
LAYOUT = re.compile(r"""["'](?:[^"'\s]*/)?(sweep\.json|report\.json|samples\.csv|summary\.csv|cycles\.csv|hopbench\.sweep)"""
                    r"""["']|cells/\*|\.failed-""")


def _sources():
    for top in ("hopbench", "transports"):
        yield from sorted((ROOT / top).rglob("*.py"))


def test_the_result_folder_layout_is_spelled_only_in_the_results_module():
    """One owner of the result folder (results.ResultFolder): no other module names a file of
    its layout, the cells glob or the set-aside rule."""
    owner = ROOT / "hopbench" / "results.py"
    assert LAYOUT.search(owner.read_text())  # the pattern still finds the owner's own spelling
    assert LAYOUT.search('glob("*/sweep.json")')  # and a glob that spells it (calibrate.py once did)
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in _sources() if p != owner
             for i, line in enumerate(p.read_text().splitlines(), 1) if LAYOUT.search(line)]
    assert not found, "\n".join(found)


def _cycles(graph, modules):
    """Strongly connected components of more than one module (Tarjan), i.e. import circles;
    grimp counts every import statement, function-level (lazy) ones included."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in modules:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for m in sorted(modules):
        if m not in index:
            visit(m)
    return found


def test_no_import_circle():
    """Issue 29: no import circle anywhere in hopbench or the transports (config <-> shape,
    analysis.commands <-> report and the package root <-> analysis were the last three)."""
    import grimp

    graph = grimp.build_graph("hopbench", "transports")
    assert _cycles(graph, set(graph.modules)) == []


def _core_imports() -> dict[str, set[str]]:
    """Each core module's core imports (lazy and type-only ones included), named from the
    core down (`kinds`, `kinds.spec`)."""
    root = ROOT / "hopbench" / "core"
    core = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
            for p in root.rglob("*.py") if p != root / "__init__.py"}

    def known(dotted: str) -> str | None:
        name = dotted.removeprefix("hopbench.core.")
        return name if dotted.startswith("hopbench.core.") and name in core else None

    deps: dict[str, set[str]] = {m: set() for m in core}
    for m, p in core.items():
        for n in ast.walk(ast.parse(p.read_text())):
            found: list[str | None] = []
            if isinstance(n, ast.ImportFrom) and n.module:
                found = [known(f"{n.module}.{a.name}") or known(n.module) for a in n.names]
            elif isinstance(n, ast.Import):
                found = [known(a.name) for a in n.names]
            deps[m] |= {x for x in found if x is not None and x != m}
    return deps


def test_every_core_module_is_the_sessions():
    """The core is "protocol, session, kinds, loops": every module of it is reached
    from the client's or the server's session; the models and the workload, which the core
    takes as core.inputs' Protocols, live in rooms of their own."""
    deps = _core_imports()
    seen, todo = {"client", "server"}, ["client", "server"]
    while todo:
        for d in deps[todo.pop()] - seen:
            seen.add(d)
            todo.append(d)
    assert sorted(set(deps) - seen) == []


def test_the_cycle_finder_finds_a_circle():
    class G:
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

        def find_modules_directly_imported_by(self, m):
            return self.edges[m]

    assert _cycles(G(), set(G.edges)) == [["a", "b", "c"]]


CORE = ROOT / "hopbench" / "core"


def test_the_core_names_no_transport():
    """The core knows transports only through the registry: no registered transport's name
    (every one the registry lists, mooncake too) is spelled in it."""
    from hopbench.core.transport import registry

    names = sorted(registry())
    assert {"tcp", "zmq", "ucx", "nixl", "mooncake"} <= set(names), names
    name = re.compile(r"""['"](%s)['"]""" % "|".join(map(re.escape, names)))
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in sorted(CORE.rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1) if name.search(line)]
    assert not found, "\n".join(found)


def _transport_imports(source: str) -> list[str]:
    """The imports of a transport module (by either name the package has: transports/ in the
    tree, hopbench.transports installed) in a module's source."""
    import ast

    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return [n for n in names if n.split(".")[0] == "transports" or n.startswith("hopbench.transports")]


def test_the_core_imports_no_transport_module():
    """The tree's transports/ is installed as hopbench.transports, a name
    import-linter's graph of the tree does not have, so an import of hopbench.transports.tcp
    in the core passed both the contract and the name check. This closes the hole: no module
    of the core, orchestration or analysis imports a transport by either name (they reach
    transports through the registry's entry points)."""
    trial = "from hopbench.transports import tcp\nimport transports.ucx\nfrom hopbench.core import transport\n"
    assert _transport_imports(trial) == ["hopbench.transports", "transports.ucx"]  # the check sees both names
    found = {str(p.relative_to(ROOT)): hits for top in ("core", "orchestration", "analysis")
             for p in sorted((ROOT / "hopbench" / top).rglob("*.py")) if (hits := _transport_imports(p.read_text()))}
    assert not found, found


def test_the_cores_c_moves_no_bytes():
    """Each transport owns its bytes down into C (hb_endpoint.h): the core's C calls no
    socket or UCX function; the transports' C does."""
    io = re.compile(r"\b(send|recv|ucp_\w+)\s*\(")
    core = [f"{p.name}:{i}: {line.strip()}" for p in sorted(CORE.glob("*.[ch]"))
            for i, line in enumerate(p.read_text().splitlines(), 1) if io.search(line)]
    assert not core, "\n".join(core)
    assert io.search((ROOT / "transports" / "_tcp.c").read_text())  # the pattern finds real I/O
    assert io.search((ROOT / "transports" / "_ucx.c").read_text())


def _body_lines(fn) -> int:
    """A function's statements, its docstring and declared parameters (typer's flags) aside."""
    import ast

    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return body[-1].end_lineno - body[0].lineno + 1 if body else 0


def test_the_cli_is_thin_and_the_server_small():
    """No CLI function does more than 40 lines of work (the logic lives in the library: run in
    orchestration.runjob, spec in orchestration.spec, matrix's config in orchestration.matrix,
    verdict and export in analysis); Server, the accept loop, is under 150 lines (a session is
    core.session's state machine, each plan kind a serving path in core.serving)."""
    import ast

    fat = {f"{p.name}:{f.name}": _body_lines(f) for p in sorted((ROOT / "hopbench" / "cli").glob("*.py"))
           for f in ast.walk(ast.parse(p.read_text())) if isinstance(f, ast.FunctionDef) and _body_lines(f) > 40}
    assert not fat, fat
    server = ast.parse((CORE / "server.py").read_text())
    cls = next(c for c in server.body if isinstance(c, ast.ClassDef) and c.name == "Server")
    assert cls.end_lineno - cls.lineno + 1 < 150


#: what a transport module may import from hopbench (docs/ARCHITECTURE.md names each: tests/test_docs_truth.py)
TRANSPORT_IMPORTS = {"hopbench.core.transport", "hopbench.errors", "hopbench.records", "hopbench.version", "hopbench.lanes"}


def test_transports_import_only_what_the_allow_list_names():
    """An allow-list, not a deny-list: a transport module imports from hopbench only the
    contract, the errors, the records, the version, the lanes (what a UCX lane that bypasses
    the network is: the transports warn and analysis judges from one definition) and its own
    package."""
    import grimp

    graph = grimp.build_graph("transports", "hopbench", include_external_packages=False)
    allowed = TRANSPORT_IMPORTS
    imported = {(m, i) for m in graph.find_descendants("transports") | {"transports"}
                for i in graph.find_modules_directly_imported_by(m) if i.startswith("hopbench")}
    assert ("transports.tcp", "hopbench.core.transport") in imported  # the graph sees the imports
    found = {(m, i) for m, i in imported if i not in allowed and not i.startswith("hopbench.transports")}
    assert not found, sorted(found)


def test_result_headers_are_typed_records():
    """A run's and a sweep's (or matrix's) header are built by results.RunReport /
    SweepReport, which the readers' schema checks accept; no writer spells the header as a
    dict literal of its own."""
    from hopbench import results as R
    from hopbench import schema as S

    run = R.RunReport(peer="h:1", config={"rung": "r"}, client_env={}, server_env={}, extra={"doctor": {}}).to_dict()
    S.check_record({**run, "payloads": []}, S.RUN_RECORD, "run")
    assert run["schema"] == R.SCHEMA and run["doctor"] == {} and len(run["result_id"]) == 32
    for kind in ("sweep", "matrix"):
        top = R.SweepReport(kind=kind, seed=1, config={"operating_tokens": 3}, shape=R.ShapeRecord(61440, 2, 4),
                            preflight={}).to_dict()
        S.check_record(top, S.SWEEP_RECORD, kind)
        assert top["kind"] == kind and top["shape"]["bytes_per_token"] == 61440
    literal = re.compile(r"""["']schema["']\s*:\s*R\.(SCHEMA|SWEEP_SCHEMA)""")
    found = [f"{p.relative_to(ROOT)}:{i}" for p in sorted((ROOT / "hopbench" / "orchestration").rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1) if literal.search(line)]
    assert not found, found


def test_the_client_side_of_a_plan_is_as_clean_as_the_servers():
    """The client side is as clean as the server's: one client path per plan kind over a transport
    resolved once per plan, partial results in a typed carrier (timing.Progress,
    Session.measured) instead of attributes patched onto exceptions, short functions in the
    client, every orchestration session a context manager, a codec parsed once per path."""
    import ast
    import re

    root = Path(__file__).resolve().parents[1] / "hopbench"
    client = (root / "core" / "client.py").read_text()
    assert client.count("get_transport(") <= 1
    patched = re.compile(r'completed_cycles = |\.measurement = |getattr\(exc, "(completed_cycles|measurement)"')
    for p in root.rglob("*.py"):
        text = p.read_text()
        assert not patched.search(text), p
        if p.parent.name == "core":
            assert "type: ignore[attr-defined]" not in text, p
        if "orchestration" in p.parts:
            assert not re.search(r"^\s*(s|session|probe) = Session\(", text, re.M), p
    longest = max(f.end_lineno - f.lineno + 1 for f in ast.walk(ast.parse(client)) if isinstance(f, ast.FunctionDef))
    assert longest <= 40, longest
    assert (root / "core" / "serving.py").read_text().count("codecs.parse(") <= 2


def _grep(pattern: str, *paths: str, exclude: tuple[str, ...] = ()) -> list[str]:
    """file:line of each line matching `pattern` under the paths (files or folders), but the
    files named in `exclude`."""
    rx, out = re.compile(pattern), []
    for base in paths:
        files = [ROOT / base] if (ROOT / base).is_file() else sorted((ROOT / base).rglob("*.py"))
        for p in files:
            if str(p.relative_to(ROOT)) in exclude:
                continue
            out += [f"{p.relative_to(ROOT)}:{i}" for i, line in enumerate(p.read_text().splitlines(), 1) if rx.search(line)]
    return out


def test_plan_kinds_are_declared_with_typed_sub_records():
    """A plan kind is declared with typed sub-records: no stream dict read by key, no dict-typed
    stream/spec/group field in the records and the plan, the guide to adding a kind."""
    import ast

    assert not _grep(r'stream(\[|\.get\()"(chunks|chunk_bytes|layers|forward_ms|cost_ms|layer_times)"', "hopbench")
    for f in ("hopbench/records.py", "hopbench/core/protocol.py", "hopbench/orchestration/runjob.py"):
        for n in ast.walk(ast.parse((ROOT / f).read_text())):
            if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") in ("stream", "spec", "group"):
                assert "dict" not in ast.unparse(n.annotation), (f, n.lineno)
    assert "Adding a plan kind" in (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    # the paths choose their variant by table (KINDS by Plan.kind, a body table by Plan.body), not by branches
    # (the exchanges whose halves BODIES pairs: their body is the table's row, never a branch)
    branches = _grep(r"if plan\.(stream|spec|codec) is not None|if plan\.(codec|uses_gpu)\b",
                     "hopbench/core/client_paths.py", "hopbench/core/serving.py", "hopbench/core/kinds/roundtrip.py",
                     "hopbench/core/kinds/stream.py")
    assert not branches, branches


def test_the_loops_are_in_one_room_and_their_choice_is_a_value():
    """The timed loops live in one room: one wait_until, no timed loop in the paths, the loop
    that ran read as a LoopChoice rather than split from its prose."""
    assert len(_grep(r"def _?wait_until", "hopbench")) == 1
    assert not _grep(r"samples\[i\]\s*=", "hopbench/core/client_paths.py", "hopbench/core/serving.py", "hopbench/core/kinds")
    assert not _grep(r'(ran|loop|which\["(client|server)"\])\.split\(\)\[0\]', "hopbench")


def test_no_function_outside_the_cli_takes_more_than_ten_parameters():
    """Hooks, pacing, identities and options are objects, so no
    signature outside the typer CLI grows past ten parameters."""
    import ast

    over = []
    for p in sorted((ROOT / "hopbench").rglob("*.py")):
        if "cli" in p.parts:
            continue
        for f in ast.walk(ast.parse(p.read_text())):
            if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef):
                a = f.args
                bound = 1 if a.args and a.args[0].arg in ("self", "cls") else 0
                n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) - bound
                if n > 10:
                    over.append((str(p.relative_to(ROOT)), f.name, n))
    assert not over, over


def test_the_core_knows_the_transports_only_from_the_registry():
    """The registry is the one list of transports: no module of the package writes three or
    more registered names as a list in prose ("tcp, zmq or ucx": a sentence that goes stale
    when a transport is added), env.py names no transport's distribution (it reports what the
    registry says each one uses), and one transport_or_skip serves every test."""
    from hopbench.core.transport import registry

    names = sorted(n for n in registry() if not n.startswith("fake"))
    name = "(?:" + "|".join(map(re.escape, names)) + ")"
    assert not _grep(rf"\b{name}, {name},? (?:or|and) {name}\b", "hopbench")
    libraries = {d for r in registry().values() for d in (r.library, *r.libraries) if d}
    assert libraries and not _grep("|".join(f'"{re.escape(d)}"' for d in sorted(libraries)), "hopbench/core/env.py")
    from hopbench.testing import transport_or_skip

    assert len(_grep(rf"^\s*def {transport_or_skip.__name__}\b", "tests", "hopbench")) == 1


def test_every_client_and_serving_path_is_reached_from_a_kind():
    """A plan's kind (KINDS) is the one way to a path: every ClientPath and ServingPath the
    core defines is what some kind builds (for some placement of the bytes) or a base of one,
    so no path lives on that no plan can reach."""
    from types import SimpleNamespace

    from hopbench.core import client_paths as CP
    from hopbench.core import kinds
    from hopbench.core import serving as SV

    built = set()
    for kind in kinds.KINDS.values():
        for body in kinds.BODIES:
            for client_memory in ("host", "cuda"):
                for server_memory in ("host", "cuda"):
                    plan = SimpleNamespace(client_memory=client_memory, server_memory=server_memory, body=body)
                    built |= {type(kind.client(plan, None)), type(kind.serving(plan))}

    def below(cls: type) -> set[type]:
        return {d for c in cls.__subclasses__() for d in {c} | below(c)}

    reached = {b for c in built for b in c.__mro__}
    assert not {c.__qualname__ for c in below(CP.ClientPath) | below(SV.ServingPath)} - {c.__qualname__ for c in reached}


def test_identity_is_typed_to_the_end():
    """Identity is typed to the end: the readers go through the typed reading (read_top is
    results.py's own), fits join on their Place and Series (no label rebuilt as a key), the
    verdict's decision is an enum, the presenters never parse the call back, and the summary
    has tidy series columns."""
    import dataclasses

    import hopbench.analysis.fit as F
    import hopbench.analysis.verdict as V
    from hopbench.analysis.summary import AGG_COLUMNS

    assert [h for h in _grep(r"\.read_top\(\)", "hopbench") if not h.startswith("hopbench/results.py:")] == []
    assert not _grep(r"gap_label\(", "hopbench/analysis")
    assert not _grep(r'startswith\(|" in call', "hopbench/analysis/report/markup.py", "hopbench/analysis/tables.py")
    assert {"place", "series"} <= {f.name for f in dataclasses.fields(F.Fit)}
    assert "decision" in {f.name for f in dataclasses.fields(V.Verdict)}
    assert {"codec", "design", "stream", "clients"} <= set(AGG_COLUMNS)


def test_documents_and_folder_names_have_one_owner():
    """Every JSON document's schema and version come from
    results.DOCUMENTS (emitted through results.document), the run schema is spelled once, and
    no module but results.py globs a folder's names."""
    from hopbench import results as R

    outside = [h for h in _grep(r'"schema": "hopbench|SCHEMA = "hopbench|"hopbench\.run"', "hopbench")
               if not h.startswith("hopbench/results.py:")]
    assert not outside, outside
    globs = [h for h in _grep(r'glob\(f?"\*-(sweep|matrix)|glob\(f"\*/\{', "hopbench")
             if not h.startswith("hopbench/results.py:")]
    assert not globs, globs
    assert R.document("verdict", {"results": []}) == {"schema": "hopbench.verdict", "schema_version": 1, "results": []}
    assert len({schema for schema, _ in R.DOCUMENTS.values()}) == len(R.DOCUMENTS)  # one name per schema


def test_one_concept_has_one_name():
    """One name each: the reply's ids are `ids` (not a codec), the payload
    design is `design` in the run's config (read back from `payload` in older records), the
    design names are records' constants, and the dead names are gone."""
    import dataclasses

    from hopbench import records as R

    assert not _grep(r"codec: (P\.)?ReplyIds|reply_codec", "hopbench")
    assert not _grep(r"_HEAD3|class _live_bar", "hopbench", "transports")
    assert "self._options" not in (ROOT / "hopbench" / "testing" / "fake_transport.py").read_text()
    assert "design" in {f.name for f in dataclasses.fields(R.RunConfig)}
    assert R.RunConfig.from_dict({"transport": "tcp", "payload": "projected"}).design == R.PROJECTED
    assert not _grep(r'^[^#]*"projected"', "hopbench/orchestration", "hopbench/config_sweep.py", "hopbench/core")


def test_the_small_stuff_of_review5_stays_done():
    """Imports at the top, hooks passed in: auth and serving import hmac, hashlib and numpy at the
    top, and no module sets a spec Work's hooks from outside (the server passes them in)."""
    assert not _grep(r"^\s+import (hmac|hashlib|numpy)", "hopbench/core/auth.py", "hopbench/core/serving.py")
    assert not _grep(r"\._batcher = |\._model = ", "hopbench")


def test_one_room_per_file_and_no_class_or_function_over_its_size():
    """Rooms of a readable size: no source file over 600 lines, no class of 250 or more, no
    function over 60; ray imported in one module; the reproduce line's round trip tested."""
    big = {str(p.relative_to(ROOT)): n for p in _sources() if (n := len(p.read_text().splitlines())) > 600}
    assert not big, big
    classes, functions = {}, {}
    for p in _sources():
        for node in ast.walk(ast.parse(p.read_text())):
            size = node.end_lineno - node.lineno + 1 if hasattr(node, "end_lineno") else 0
            if isinstance(node, ast.ClassDef) and size >= 250:
                classes[f"{p.relative_to(ROOT)}:{node.name}"] = size
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and size > 60:
                functions[f"{p.relative_to(ROOT)}:{node.name}"] = size
    assert not classes, classes
    assert not functions, functions
    ray = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "hopbench" / "orchestration").rglob("*.py"))
           if re.search(r"^\s*(import ray\b|from ray\b)", p.read_text(), re.M)]
    assert ray == ["hopbench/orchestration/matrix/ray.py"], ray
    assert not _grep(r"_run_command", "hopbench")
    assert re.search(r"def test_\w*to_argv", (ROOT / "tests" / "test_report.py").read_text())


def test_the_transport_contract_is_explicit():
    """The transport contract's parts are named types, one spin policy, specific exception maps."""
    from hopbench.core import transport
    from hopbench.testing import conformance

    assert not _grep(r"\._timeout", "hopbench/core")
    assert not _grep(r'getattr\((channel|chan), "native_', "hopbench/core")
    assert not _grep(r"sched_yield", "transports")  # one spin policy: core.transport.Spinner
    assert not _grep(r"isinstance\(exc, c\)", "transports")  # the exception maps pick the most specific class
    assert all(hasattr(transport, n) for n in ("NativeCapable", "ControlChannel", "Spinner"))
    import inspect

    assert "maker" in str(inspect.signature(conformance.LOOP_CHECKS[0]))
    assert not _grep(r'check\("mytransport"\)', "hopbench")
    assert '["zmq", "ucx"]' not in (ROOT / "tests" / "test_conformance.py").read_text()


def test_analysis_never_parses_a_label_back():
    """Labels are spelled from typed identity and never split again; report.json
    and sweep.json are read through results.py; a sweep cell and a Group share one CellKey."""
    label_parsing = r'split\("@"\)|partition\("@"\)|partition\("\+"\)|split\(" \+"\)|"@" in |"\+" in |removesuffix\(f"@'
    assert not _grep(label_parsing, "hopbench/analysis", "hopbench/orchestration")
    assert not _grep(r"_MEMO", "hopbench/analysis")
    assert not _grep(r"json\.loads\(.*(RUN_FILE|SWEEP_FILE|sweep\.json|report\.json)", "hopbench",
                     exclude=("hopbench/results.py",))
    assert not _grep(r'"hopbench\.spec(-targets)?"', "hopbench", exclude=("hopbench/results.py",))
    # the cell identity declared once: a sweep cell is a records.CellKey, and so is a Group's
    from hopbench.analysis.data import Group
    from hopbench.orchestration.sweep.plan import Cell
    from hopbench.records import CellKey

    assert issubclass(Cell, CellKey) and Group.__dataclass_fields__["cell"].type in ("CellKey", CellKey)


def test_each_short_alias_names_one_module_and_old_names_stay_gone():
    """Docs without the old counts, no stale API names, one module per short alias."""
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    assert not re.search(r"own three|tcp, zmq, ucx:", doc)
    assert not _grep(r"REGISTRY\)|from_shape|hopbench\.transport\.Channel|_expect\(state", "hopbench")
    seen = collections.defaultdict(set)  # each short alias names one module across the package
    for p in (ROOT / "hopbench").rglob("*.py"):
        for m in re.finditer(r"from (hopbench[\w.]*) import (\w+) as ([A-Z]{1,2})\b|import (hopbench[\w.]+) as "
                             r"([A-Z]{1,2})\b", p.read_text()):
            seen[m[3] or m[5]].add(f"{m[1]}.{m[2]}" if m[1] else m[4])
    assert all(len(v) == 1 for v in seen.values()), {k: v for k, v in seen.items() if len(v) > 1}
    assert LAYOUT.search('glob("*/sweep.json")')
    assert not _grep(r"hidden: int = 6144", "hopbench")


def test_tests_are_named_for_the_behaviour_they_check():
    """No test file is named after the review or the issue that asked for it
    (each test lives with the behaviour it checks), and every conformance check states, in
    one line, the Channel or Transport clause it enforces."""
    stray = sorted(p.name for p in (ROOT / "tests").glob("test_*.py") if re.match(r"test_(review|first_hour)", p.name))
    assert stray == [], stray
    tree = ast.parse((ROOT / "hopbench" / "testing" / "conformance.py").read_text())
    checks = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name.startswith("check_")]
    assert len(checks) > 15 and all(ast.get_docstring(f) for f in checks), [f.name for f in checks if not ast.get_docstring(f)]


def test_the_drafter_extra_agrees_with_the_ucx_extras_cuda_line():
    """Issue 62 item 6: `.[drafter,proxy]` beside the ucx extra resolved torch's CUDA 13 build,
    whose cuda-bindings 13 broke rmm-cu12's pin (< 13). The drafter extra pins cuda-bindings
    inside every bound the ucx extra's packages put on it."""
    import importlib.metadata as md
    import tomllib

    from packaging.requirements import Requirement

    extras = tomllib.loads(Path("pyproject.toml").read_text())["project"]["optional-dependencies"]
    ours = [Requirement(r) for r in extras["drafter"] if Requirement(r).name == "cuda-bindings"]
    assert ours, "the drafter extra does not pin cuda-bindings"
    try:
        theirs = [Requirement(r) for r in md.requires("rmm-cu12") or [] if Requirement(r).name == "cuda-bindings"]
    except md.PackageNotFoundError:
        pytest.skip("rmm-cu12 (the ucx extra's) is not installed here")
    for probe in ("12.9.4", "13.0.3", "13.5.0"):  # every version ours allows, theirs allows
        if ours[0].specifier.contains(probe):
            assert all(t.specifier.contains(probe) for t in theirs), (probe, theirs)
    assert not ours[0].specifier.contains("13.0.3")

