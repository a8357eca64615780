"""A shader's checks: a GLSL entry point is main, specialization constant ids are unique, include folders
and build options are safe to hand the compiler, its source file exists unless no command uses it."""
from __future__ import annotations

import logging
from typing import Any, Iterator, Sequence

from .. import reference_phrases as phrases
from ..build_options import build_options_problem
from ..checking import CheckContext, Entry, Problem, is_dir, quote, src_problems

log = logging.getLogger("vkcap.validate")


def unique_constant_ids(entry: Entry, constants: Sequence[dict[str, Any]], parts: tuple[str | int, ...]) -> Iterator[Problem]:
    """Each specialization constant id at most once in ``constants`` (at ``parts`` inside ``entry``)."""
    seen: dict[int, int] = {}
    for j, constant in enumerate(constants):
        cid = constant["id"]
        if cid in seen:
            yield entry.place(*parts, j, "id"), (f"specialization constant id {cid} is set twice ({parts[-1]}[{seen[cid]}] "
                                                 f"and {parts[-1]}[{j}])")
        seen[cid] = j


def field_problems(ctx: CheckContext, entry: Entry) -> Iterator[Problem]:
    body = entry.body
    if body["type"] == "GLSL" and body.get("entry", "main") != "main":
        yield entry.place("entry"), f"a GLSL shader's entry point must be 'main', got {quote(body['entry'])}"
    yield from unique_constant_ids(entry, body.get("specialization_constants", ()), ("specialization_constants",))


def path_problems(ctx: CheckContext, entry: Entry) -> Iterator[Problem]:
    """No include folder holds a NUL (src and dst are every resource's, checked before)."""
    for j, folder in enumerate(entry.body.get("include_dirs", ())):
        if "\0" in str(folder):
            yield entry.place("include_dirs", j), "holds a NUL character"


def build_option_problems(ctx: CheckContext, entry: Entry) -> Iterator[Problem]:
    """build_options hold only what may reach the compiler (:mod:`vkcore.scenario.build_options`)."""
    problem = build_options_problem(entry.body.get("build_options", ""))
    if problem is not None:
        yield entry.place("build_options"), problem


def file_problems(ctx: CheckContext, entry: Entry) -> Iterator[Problem]:
    """The source exists (a missing one of a shader no command uses is a warning: it is never compiled, as
    in the reference runner); include folders exist."""
    body = entry.body

    def unused(problem: str) -> bool:
        if body["uid"] in used_shaders(ctx):
            return False
        log.warning("%s: %s: %s; no command uses shader %s, so it is not compiled (as in the reference runner)",
                    ctx.path, entry.place("src"), problem, quote(body["uid"]))
        return True

    cannot_open = phrases.CANNOT_OPEN_GLSL if body.get("type") == "GLSL" else phrases.CANNOT_OPEN
    yield from src_problems(ctx, entry, cannot_open=cannot_open, missing=unused)
    for j, folder in enumerate(body.get("include_dirs", ())):
        resolved = ctx.resolve(folder)
        if not is_dir(resolved):
            yield entry.place("include_dirs", j), f"include folder not found: {resolved}"


def used_shaders(ctx: CheckContext) -> set[str]:
    """Uids of the shaders some command (or a graph's substitution) uses."""
    used = set()
    for command in ctx.commands:
        used.add(command.body.get("shader_ref", ""))
        used.update(s.get("shader_ref", "") for s in command.body.get("shader_substitutions", ()))
    for resource in ctx.resources:
        if resource.kind == "graph":
            used.update(s.get("shader_ref", "") for s in resource.body.get("shader_substitutions", ()))
    return used


CHECKS = {"fields": field_problems, "paths": path_problems, "build_options": build_option_problems,
          "files": file_problems}
