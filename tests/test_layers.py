"""vkcore's packages are layers: at run time each imports only the ones before it (type annotations
under ``TYPE_CHECKING`` may look further: a command kind is given the session that runs it)."""
from __future__ import annotations

import re
from pathlib import Path

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
