"""The house's floors, written down once, and the direction of every import between them.

``LAYERS`` lists the floors from the top (what only a person runs) to the ground
(``policies``, pure). A module belongs to the floor of the longest prefix that names it.
A module may import its own floor and any floor below; an import from a lower floor to a
higher one fails :func:`test_no_import_runs_up_a_floor`, and any cycle between modules
fails :func:`test_no_import_cycle`. The README's "Layout" section draws the same floors.

Every import counts, wherever it is written: at module level, inside a function (a lazy
import only hides a dependency from the interpreter's start-up, not from the design) and
under ``if TYPE_CHECKING:`` (a name a module's signatures use is a dependency too; such
imports are reported with the kind ``typing`` so a reader sees they cost nothing at run
time, but they are held to the same rule). Run ``python tests/test_imports.py`` to print
the graph's violations with their kinds.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sidecar", "judge", "uplink", "policies")

#: The floors, top first. Each floor is the module prefixes on it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("commands", ("sidecar.cli", "sidecar.demo")),
    ("collector wing", ("sidecar.collector",)),
    ("composition", ("sidecar.app",)),
    ("surfaces", ("sidecar.api", "sidecar.console")),
    ("runtime", ("sidecar.runtime",)),
    ("services", ("sidecar.services",)),
    ("export", ("sidecar.export", "sidecar.alerts")),
    ("engine", ("sidecar.engine",)),
    ("trials", ("sidecar.trials",)),
    ("retention", ("sidecar.retention",)),
    ("telemetry", ("sidecar.telemetry",)),
    ("integrations", ("sidecar.integrations",)),
    ("ingest", ("sidecar.ingest",)),
    ("store", ("sidecar.store",)),
    ("foundations", (
        "sidecar", "sidecar.config", "sidecar.auth", "sidecar.providers", "sidecar.errors",
        "sidecar.prices", "sidecar.redact", "sidecar.seal", "sidecar.supervise",
    )),
    ("judge, uplink", ("judge", "uplink")),
    ("policies", ("policies",)),
)


@dataclass(frozen=True, order=True)
class Import:
    source: str
    target: str
    kind: str  # "module", "lazy" (inside a function) or "typing" (under TYPE_CHECKING)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of our packages by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(root: Path = ROOT) -> list[Import]:
    """Every import between two of our modules, once per (source, target, kind)."""
    mods = modules(root)

    def owner(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    found: set[Import] = set()
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node, kind in _walk(ast.parse(path.read_text(encoding="utf-8")), "module"):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for target in targets:
                if target.split(".")[0] not in PACKAGES:
                    continue
                resolved = owner(target)
                if resolved is not None and resolved != name:
                    found.add(Import(name, resolved, kind))
    return sorted(found)


#: The nodes a statement can sit in: statements' bodies, ``except`` clauses and ``case`` blocks.
#: An expression holds no statement (a lambda's body is an expression), so :func:`_walk` does
#: not descend into expressions, most of a module's nodes (issue 29: a tenth of the CPU).
_HOLDERS = (ast.stmt, ast.excepthandler, ast.match_case)


def _walk(node: ast.AST, kind: str) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, _HOLDERS):
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, kind
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.body:
                yield from _walk_stmt(stmt, "typing")
            for stmt in child.orelse:
                yield from _walk_stmt(stmt, kind)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from _walk(child, "lazy" if kind == "module" else kind)
        else:
            yield from _walk(child, kind)


def _walk_stmt(stmt: ast.stmt, kind: str) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        yield stmt, kind
    else:
        yield from _walk(stmt, kind)


def floor(module: str) -> int:
    """The index of ``module``'s floor in :data:`LAYERS` (0 is the top); KeyError if none names it."""
    best: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), index)
    if best is None:
        raise KeyError(module)
    return best[1]


def upward(edges: Iterable[Import]) -> list[Import]:
    """The imports that run from a lower floor to a higher one."""
    return [e for e in edges if floor(e.source) > floor(e.target)]


def cycles(edges: Iterable[Import]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for e in edges:
        graph[e.source].add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return sorted(groups)


def test_every_module_has_a_floor() -> None:
    homeless = []
    for name in modules():
        try:
            floor(name)
        except KeyError:
            homeless.append(name)
    assert homeless == [], f"add these modules to LAYERS: {homeless}"


@pytest.fixture(scope="module")
def edges() -> list[Import]:
    """Our imports, read once for the tests below (each read parses every module of ours)."""
    return imports()


def test_no_import_runs_up_a_floor(edges: list[Import]) -> None:
    found = [f"{e.source} -> {e.target} ({e.kind})" for e in upward(edges)]
    assert found == [], "imports from a lower floor to a higher one:\n" + "\n".join(found)


def test_no_import_cycle(edges: list[Import]) -> None:
    assert cycles(edges) == []


def test_policies_are_pure(edges: list[Import]) -> None:
    """``policies`` imports nothing of ours (plain data in, plain data out)."""
    found = [e for e in edges if e.source.split(".")[0] == "policies" and e.target.split(".")[0] != "policies"]
    assert found == []


def test_judge_and_uplink_never_import_the_sidecar(edges: list[Import]) -> None:
    found = [e for e in edges if e.source.split(".")[0] in ("judge", "uplink") and e.target.split(".")[0] == "sidecar"]
    assert found == []


def test_the_collector_wing_is_imported_only_by_the_command(edges: list[Import]) -> None:
    """What only the control plane runs (``sidecar/collector/``) is imported by no sidecar
    module: only the ``shadowtrial`` command starts it, and the explorable demo the command
    runs (``shadowtrial demo --stay`` starts a control plane beside its sidecar)."""
    found = [
        e for e in edges
        if e.target.startswith("sidecar.collector")
        and not e.source.startswith(("sidecar.collector", "sidecar.cli", "sidecar.demo.explore"))
    ]
    assert found == []


def test_the_checker_sees_each_kind_of_import(tmp_path: Path) -> None:
    """The machinery itself: a lazy, a TYPE_CHECKING and a relative import are all seen, and a
    cycle and an upward import are found."""
    pkg = tmp_path / "policies"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from policies import b\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import c\n"
        "def f():\n    import policies.a\n"
    )
    (pkg / "c.py").write_text("")
    for other in ("sidecar", "judge", "uplink"):
        (tmp_path / other).mkdir()
    edges = imports(tmp_path)
    assert {(e.source, e.target, e.kind) for e in edges} == {
        ("policies.a", "policies.b", "module"),
        ("policies.b", "policies.c", "typing"),
        ("policies.b", "policies.a", "lazy"),
    }
    assert cycles(edges) == [["policies.a", "policies.b"]]
    assert upward([Import("policies", "sidecar.cli.main", "module")]) != []


if __name__ == "__main__":  # print the violations: python tests/test_imports.py
    edges = imports()
    up = upward(edges)
    for e in up:
        print(f"upward  {LAYERS[floor(e.source)][0]:>14} -> {LAYERS[floor(e.target)][0]:<14} {e.source} -> {e.target} ({e.kind})")
    found = cycles(edges)
    for group in found:
        print("cycle  ", " <-> ".join(group))
    pairs = {(e.source, e.target) for e in up}
    print(f"{len(pairs)} upward imports (module pairs), {len(found)} cycles, {len(modules())} modules")
    sys.exit(1 if up or found else 0)
