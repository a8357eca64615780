"""vkcore's packages are layers: at run time each imports only the ones before it (type annotations
under ``TYPE_CHECKING`` may look further: a command kind is given the session that runs it)."""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Iterator

VKCORE = Path(__file__).resolve().parent.parent / "vkcore"
ORDER = ["errors", "version", "safe_text", "bounded_numbers", "paths", "outputs", "output_folders", "reference_log", "scenario", "device", "resources", "shaders", "graphs", "commands", "exec"]
RELATIVE = re.compile(r"\s*from (\.+)([\w.]*) import (.+)")


def runtime_imports(path: Path) -> set[str]:
    """The vkcore top-level modules or packages ``path`` imports outside ``if TYPE_CHECKING:`` blocks."""
    found: set[str] = set()
    in_type_checking = False
    for line in path.read_text().split("\n"):
        if line.startswith("if TYPE_CHECKING"):
            in_type_checking = True
            continue
        if in_type_checking and line.strip() and not line.startswith((" ", "\t")):
            in_type_checking = False
        m = None if in_type_checking else RELATIVE.match(line)
        if m is None:
            continue
        dots, module, names = m.groups()
        package = list(path.relative_to(VKCORE.parent).parts[:-1])
        absolute = package[: len(package) - (len(dots) - 1)] + (module.split(".") if module else [])
        found |= ({n.strip().split(" as ")[0] for n in names.split(",")} if len(absolute) < 2 else {absolute[1]})
    return found


def test_every_module_belongs_to_a_layer() -> None:
    tops = {p.stem if p.is_file() else p.name for p in VKCORE.iterdir()
            if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())}
    assert tops == set(ORDER)


def test_packages_import_only_the_layers_below() -> None:
    upward = []
    for path in sorted(VKCORE.rglob("*.py")):
        parts = path.relative_to(VKCORE).parts
        if parts == ("__init__.py",):
            continue
        me = parts[0].removesuffix(".py")
        for used in runtime_imports(path):
            if used in ORDER and ORDER.index(used) > ORDER.index(me):
                upward.append(f"{path.relative_to(VKCORE)} imports {used}")
    assert upward == []


PACKAGES = ("vkcore", "capture", "replay", "vkcap")
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
        for path in sorted((VKCORE.parent / package).rglob("*.py")):
            lines = path.read_text().splitlines()
            covered: set[int] = set()
            for stmt, block in _imports_in_functions(ast.parse("\n".join(lines))):
                i = next(k for k, s in enumerate(block) if s is stmt)
                before = block[i - 1] if i else None
                if _says_why(lines, stmt) or (isinstance(before, (ast.Import, ast.ImportFrom)) and id(before) in covered):
                    covered.add(id(stmt))
                else:
                    offenders.append(f"{path.relative_to(VKCORE.parent)}:{stmt.lineno}: {lines[stmt.lineno - 1].strip()}")
    assert offenders == []
