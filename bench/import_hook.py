"""Code run around a module's first execution, for the benches that time or change a vkcap command
inside its own process: the hook acts as each module is imported, so the command keeps its own
import order (importing the modules up front would move their cost out of the command's stages).
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import runpy
import sys
from types import ModuleType
from typing import Any, Callable

#: around(name, module, execute): runs instead of the module's execution, and calls execute(module) once
Around = Callable[[str, ModuleType, Callable[[ModuleType], None]], None]


class AroundImport(importlib.abc.MetaPathFinder):
    """Runs ``around`` in place of the execution of every module that ``wanted`` names (found on
    ``sys.path`` as usual)."""

    def __init__(self, wanted: Callable[[str], bool], around: Around) -> None:
        self.wanted = wanted
        self.around = around

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if not self.wanted(name):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader: Any = spec.loader
        execute = loader.exec_module
        loader.exec_module = lambda module: self.around(name, module, execute)
        return spec


def run_vkcap(argv: list[str]) -> None:
    """Run ``vkcap ARGV`` in this process, as ``python -m vkcap`` would."""
    sys.argv = ["vkcap", *argv]
    runpy.run_module("vkcap", run_name="__main__", alter_sys=True)
