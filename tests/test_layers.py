"""The layer contract, read from the code's syntax trees: vkcap's four packages are layers (vkcore <
capture < replay < vkcap) and vkcore's own packages are layers inside it. At run time a module imports
only from its own layer and the ones before it, and no module reaches itself through what it imports.
Every import counts, inside functions too; only ``if TYPE_CHECKING:`` blocks may look further (a command
kind's annotations name the session that runs it).
"""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["vkcore", "capture", "replay", "vkcap"]
"""vkcap's packages, lowest first."""
VKCORE_ORDER = ["errors", "version", "safe_text", "bounded_numbers", "paths", "outputs", "output_folders",
                "reference_log", "scenario", "device", "resources", "shaders", "graphs", "commands", "exec"]
"""vkcore's top-level modules and packages, lowest first."""


@lru_cache(maxsize=1)
def modules() -> dict[str, Path]:
    """Every module of the four packages by dotted name (a package by its own name)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def type_checking_nodes(tree: ast.AST) -> set[int]:
    """The ids of every node under an ``if TYPE_CHECKING:`` block."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            inside |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return inside


def imported(name: str, path: Path) -> set[str]:
    """The modules of the four packages that module ``name`` imports at run time, anywhere in its code."""
    known = modules()
    tree = ast.parse(path.read_text())
    skip = type_checking_nodes(tree)
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(here[: len(here) - node.level + 1] + [node.module or ""]).strip(".") if node.level else (node.module or "")
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


@lru_cache(maxsize=1)
def graph() -> dict[str, frozenset[str]]:
    return {name: frozenset(imported(name, path)) for name, path in modules().items()}


def test_every_vkcore_module_belongs_to_a_layer() -> None:
    tops = {p.stem if p.is_file() else p.name for p in (ROOT / "vkcore").iterdir()
            if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())}
    assert tops == set(VKCORE_ORDER)


def test_no_import_points_up_from_one_package_to_a_later_one() -> None:
    rank = {package: i for i, package in enumerate(PACKAGES)}
    upward = sorted(f"{a} imports {b}" for a, used in graph().items() for b in used
                    if rank[b.split(".")[0]] > rank[a.split(".")[0]])
    assert upward == []


def test_vkcore_packages_import_only_the_layers_below() -> None:
    def layer(module: str) -> int | None:
        parts = module.split(".")
        return VKCORE_ORDER.index(parts[1]) if parts[0] == "vkcore" and len(parts) > 1 else None

    upward = sorted(f"{a} imports {b}" for a, used in graph().items() for b in used
                    if layer(a) is not None and layer(b) is not None and layer(b) > layer(a))  # type: ignore[operator]
    assert upward == []


def test_no_circle_of_modules() -> None:
    """No module reaches itself through the modules it imports (a package's ``__init__`` included)."""
    assert [sorted(c) for c in strongly_connected(graph()) if len(c) > 1] == []


def test_the_checks_see_every_kind_of_import(tmp_path: Path) -> None:
    """The reader behind these tests finds absolute, relative and in-function imports, and leaves out
    ``TYPE_CHECKING`` blocks: a check that cannot see an import cannot refuse it."""
    source = ("from typing import TYPE_CHECKING\nimport replay.suite\nfrom .. import records\n"
              "if TYPE_CHECKING:\n    from vkcap import cli\n"
              "def f():\n    from replay.options import ReplayOptions\n")
    path = tmp_path / "m.py"
    path.write_text(source)
    assert imported("capture.format.codecs.m", path) == {"replay.suite", "capture.format", "capture.format.records", "replay.options"}


LAZY = "# lazy:"


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imports_in_functions(node: ast.AST, in_function: bool = False) -> Iterator[tuple[ast.stmt, list[ast.stmt]]]:
    """Each import inside a function (outside ``if TYPE_CHECKING:``) with the statement list holding it."""
    for field in ("body", "orelse", "finalbody", "handlers", "cases"):
        block = getattr(node, field, None)
        if not isinstance(block, list):
            continue
        for child in block:
            if _is_type_checking(child):
                continue
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, block
            yield from _imports_in_functions(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))


def _says_why(lines: list[str], stmt: ast.stmt) -> bool:
    """A ``# lazy:`` comment on one of the statement's lines, or on the line just above it."""
    own = lines[stmt.lineno - 1: stmt.end_lineno]
    above = lines[stmt.lineno - 2].strip() if stmt.lineno >= 2 else ""
    return any(LAZY in line for line in own) or above.startswith(LAZY)


def test_every_import_inside_a_function_says_why() -> None:
    """An import inside a function is there for start-up time (or for an order that matters), and says
    so: a ``# lazy:`` comment on its line or the line above; one such comment above the first import of
    a run of imports (no other statement between them) covers the run."""
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            lines = path.read_text().splitlines()
            covered: set[int] = set()
            for stmt, block in _imports_in_functions(ast.parse("\n".join(lines))):
                i = next(k for k, s in enumerate(block) if s is stmt)
                before = block[i - 1] if i else None
                if _says_why(lines, stmt) or (isinstance(before, (ast.Import, ast.ImportFrom)) and id(before) in covered):
                    covered.add(id(stmt))
                else:
                    offenders.append(f"{path.relative_to(ROOT)}:{stmt.lineno}: {lines[stmt.lineno - 1].strip()}")
    assert offenders == []


def strongly_connected(edges: dict[str, frozenset[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of ``edges``, without recursion."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(edges[root])))]
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component)
    return components
