"""Validation of a parsed scenario document: the JSON Schema, then the checks a schema cannot express.

:func:`validate_document` raises :class:`~vkcore.errors.ScenarioError` for the first problem found, with
``file`` = the scenario file and ``place`` = the JSON path of the offending value, e.g.
``scenario.json: resources[3].buffer.size: must be an integer >= 1, got -4``.

Guarantees:

- The schema pass (``vkcore/scenario/schema/scenario.schema.json``, JSON Schema draft 2020-12) runs at most once per
  distinct document: a document that passed is remembered by an empty marker file named by
  ``sha256(canonical JSON + schema bytes + validator version)`` under ``$VKCAP_CACHE_DIR/validated/``
  (default ``$XDG_CACHE_HOME/vkcap`` or ``~/.cache/vkcap``). On a hit, ``jsonschema`` is not even imported
  (it costs ~85 ms). A cache that cannot be read or written never fails validation.
- ``import vkcore.scenario.validate`` does not import ``jsonschema``.
- The semantic checks (references, uniqueness, files and their sizes, ranges) always run; they are cheap.
  They assume a schema-valid document, which is why they run after the schema pass (or its cached result).
  This module makes the ones that span kinds (uids, memory groups, references from the models' ``REFS``,
  src/dst paths, shader stages from ``SHADER_STAGES``); each kind's own are in the module of
  :mod:`vkcore.scenario.checks` its model class names, run in the phases of :mod:`vkcore.scenario.checking`.
- Integers must be JSON integers: ``40.0`` is rejected where the schema says integer.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from ..errors import ScenarioError, json_path
from ..version import vkcap_version_if_read
from . import reference_phrases as phrases
from .checking import PHASES, Check, CheckContext, Entry, Problem, checks_of, hint, noun, quote, src_problems
from .model import COMMAND_ALIASES, COMMAND_KINDS as MODEL_COMMANDS, DATA, RESOURCE_KINDS as MODEL_RESOURCES, RefRules

SCHEMA_RESOURCE = "scenario/schema/scenario.schema.json"
MEMORY_KINDS = tuple(kind for kind, cls in MODEL_RESOURCES.items() if cls.HOLDS_DATA)  # buffer, image, tensor

# Reference-runner names of commands vkcap does not take, with vkcap's spelling (same fields); none now.
RENAMED_KINDS: dict[str, str] = {}

_TYPE_NOUNS = {"integer": "an integer", "string": "a string", "array": "an array", "object": "an object",
               "number": "a number", "boolean": "true or false", "null": "null"}
_MAX_LISTED_CHOICES = 12


# ---------------------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------------------

def validate_document(document: dict[str, Any], path: Path) -> None:
    """Validate a parsed scenario ``document`` read from ``path``; raise :class:`ScenarioError` if invalid."""
    key = _cache_key(document)
    if key is None:  # not plain JSON data: perhaps an integer too long to read (see parse_json_int)
        _check_long_integers(document, path)
    if key is None or not _cache_has(key):
        _schema_pass(document, path)
        if key is not None:
            _cache_put(key)
    _semantic_checks(document, Path(path))


class LongInteger:
    """A JSON integer with more digits than Python converts to ``int`` (``sys.get_int_max_str_digits()``,
    4300 by default): kept as its digit count, and refused by validation with its JSON path."""

    __slots__ = ("digits",)

    def __init__(self, digits: int) -> None:
        self.digits = digits

    def __repr__(self) -> str:
        return f"LongInteger(digits={self.digits})"


def parse_json_int(text: str) -> int | LongInteger:
    """``json.loads``' ``parse_int``: ``int(text)``, or a :class:`LongInteger` when ``text`` has more
    digits than Python converts (``int()`` would raise ValueError, outside any JSON path)."""
    limit = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 0
    digits = len(text) - text.startswith("-")
    if limit and digits > limit:
        return LongInteger(digits)
    return int(text)


def _check_long_integers(document: Any, path: Path) -> None:
    """Raise :class:`ScenarioError`, at its JSON path, for the first :class:`LongInteger` in ``document``
    (walked without recursion, so however deep it is nested)."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(document, ())]
    while stack:
        value, parts = stack.pop()
        if isinstance(value, LongInteger):
            raise ScenarioError(f"an integer of {value.digits} digits is far out of range", file=path,
                                place=json_path(*parts))
        if isinstance(value, dict):
            stack.extend((v, (*parts, str(k))) for k, v in reversed(list(value.items())))
        elif isinstance(value, list):
            stack.extend((v, (*parts, i)) for i, v in reversed(list(enumerate(value))))


# ---------------------------------------------------------------------------------------------------------
# The validated-document cache
# ---------------------------------------------------------------------------------------------------------

_schema_bytes_cache: bytes | None = None
_validator_cache: Any = None


def _schema_bytes() -> bytes:
    """The schema file's bytes, read once per process from the package."""
    global _schema_bytes_cache
    if _schema_bytes_cache is None:
        # lazy: vkcap reproduce imports this module, not importlib.resources
        from importlib.resources import files

        _schema_bytes_cache = files("vkcore").joinpath(SCHEMA_RESOURCE).read_bytes()
    return _schema_bytes_cache


def _version_tag() -> bytes:
    """What identifies this validator: vkcap's version (when known without cost) and this module's source."""
    parts = [vkcap_version_if_read(),
             str(getattr(sys.modules.get("vkcore"), "__version__", ""))]
    try:
        parts.append(hashlib.sha256(Path(__file__).read_bytes()).hexdigest())
    except OSError:
        parts.append("no-source")
    return "\0".join(parts).encode()


def _cache_key(document: dict[str, Any]) -> str | None:
    """The document's marker name, or None when it cannot be computed (then nothing is cached)."""
    try:
        canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    except (TypeError, ValueError, RecursionError):
        return None
    h = hashlib.sha256()
    for chunk in (canonical.encode("ascii"), _schema_bytes(), _version_tag()):
        h.update(len(chunk).to_bytes(8, "little"))
        h.update(chunk)
    return h.hexdigest()


def cache_dir() -> Path | None:
    """Folder of the validated-document markers, or None when no home folder can be found."""
    root = os.environ.get("VKCAP_CACHE_DIR")
    if root:
        return Path(root) / "validated"
    xdg = os.environ.get("XDG_CACHE_HOME")
    try:
        base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    except (RuntimeError, KeyError, OSError):
        return None
    return base / "vkcap" / "validated"


def _cache_has(key: str) -> bool:
    folder = cache_dir()
    try:
        return folder is not None and (folder / key).is_file()
    except (OSError, ValueError):
        return False


def _cache_put(key: str) -> None:
    """Remember that a document passed the schema; never raises."""
    folder = cache_dir()
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / key, os.O_WRONLY | os.O_CREAT, 0o644)
        os.close(fd)
    except (OSError, ValueError):
        pass


# ---------------------------------------------------------------------------------------------------------
# The schema pass and its error messages
# ---------------------------------------------------------------------------------------------------------

def _validator() -> Any:
    """The schema validator, built once per process. Integers must be JSON integers (40.0 is not one)."""
    global _validator_cache
    if _validator_cache is None:
        # lazy: vkcap run imports this module, not jsonschema, jsonschema.validators (with jsonschema_specifications, referencing, rpds, typing_extensions)
        from jsonschema import Draft202012Validator, validators

        def is_integer(_checker: Any, instance: Any) -> bool:
            return isinstance(instance, int) and not isinstance(instance, bool)

        checker = Draft202012Validator.TYPE_CHECKER.redefine("integer", is_integer)
        strict = validators.extend(Draft202012Validator, type_checker=checker)
        _validator_cache = strict(json.loads(_schema_bytes()))
    return _validator_cache


def _schema_pass(document: dict[str, Any], path: Path) -> None:
    # lazy: vkcap run imports this module, not jsonschema.exceptions (with jsonschema_specifications, referencing, rpds, typing_extensions)
    from jsonschema.exceptions import best_match

    error = best_match(_validator().iter_errors(document))
    if error is not None:
        parts = list(error.absolute_path)
        place, message = _describe(error, parts)
        raise ScenarioError(message, file=path, place=place)


def _describe(error: Any, parts: list[str | int]) -> tuple[str, str]:
    """Turn one jsonschema error into (JSON path, human message)."""
    kind = error.validator
    value = error.instance
    schema = error.schema
    place = json_path(*parts)
    item_of = parts[0] if len(parts) == 2 and isinstance(parts[1], int) else None  # a resources/commands item
    if kind == "required":
        missing = [name for name in error.validator_value if name not in value]
        return place, f"missing required field '{missing[0]}'"
    if kind == "additionalProperties":
        allowed = list(schema.get("properties", {}))
        extra = sorted(k for k in value if k not in allowed)[0]
        if item_of is not None:
            what = "resource" if item_of == "resources" else "command"
            if extra in RENAMED_KINDS:
                return place, f"unknown {what} kind {quote(extra)}; vkcap spells it {quote(RENAMED_KINDS[extra])}"
            return place, f"unknown {what} kind {quote(extra)} (expected one of: {', '.join(allowed)})" + hint(
                extra, allowed, listed=True)
        suggestion = hint(extra, allowed, listed=False)
        if not suggestion and len(allowed) <= _MAX_LISTED_CHOICES:
            suggestion = f" (allowed: {', '.join(allowed)})"
        return place, f"unknown field {quote(extra)}{suggestion}"
    if kind in ("minProperties", "maxProperties") and item_of is not None:
        what = "resource" if item_of == "resources" else "command"
        got = f"got {len(value)}: {', '.join(value)}" if value else "got none"
        return place, f"expected exactly one key (the {what} kind), {got}"
    if kind == "type":
        wanted: list[str] = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        nouns = [_TYPE_NOUNS.get(t, t) for t in wanted]
        return place, f"must be {' or '.join(nouns)}, got {_show(value)}"
    if kind == "enum":
        return place, _enum_message(value, list(error.validator_value), parts[-1] if parts else "")
    if kind in ("minimum", "maximum"):
        noun = _TYPE_NOUNS.get(schema.get("type", ""), "a number")
        op = ">=" if kind == "minimum" else "<="
        text = f"must be {noun} {op} {error.validator_value}, got {_show(value)}"
        return place, f"{phrases.NO_MIPS} ({text})" if parts and parts[-1] == "mips" and value == 0 else text
    if kind == "multipleOf":
        return place, f"must be a multiple of {error.validator_value}, got {_show(value)}"
    if kind in ("minItems", "maxItems"):
        low, high = schema.get("minItems"), schema.get("maxItems")
        if low is not None and high is not None:
            wanted_n = f"{low} item" if low == high else f"{low} to {high} items"
            if low == high and low != 1:
                wanted_n += "s"
            return place, f"must have {wanted_n}, got {len(value)}"
        if kind == "minItems":
            return place, f"must have at least {low} item{'s' if low != 1 else ''}, got {len(value)}"
        return place, f"must have at most {high} item{'s' if high != 1 else ''}, got {len(value)}"
    if kind == "minLength":
        return place, "must not be empty"
    if kind == "uniqueItems":
        twice = next(v for i, v in enumerate(value) if v in value[:i])
        shown = quote(twice) if isinstance(twice, str) else _show(twice)
        return place, f"each value may appear once, {shown} appears {value.count(twice)} times"
    return place, error.message


def _enum_message(value: Any, choices: list[Any], field: str | int = "") -> str:
    """``unknown value 'x' (expected one of: ...)``, in the reference's words where it has some for ``field``
    (:data:`~vkcore.scenario.reference_phrases.UNKNOWN_VALUE`: ``Unknown tiling value 'x' (...)``)."""
    if not isinstance(value, str):
        return f"must be one of: {', '.join(map(str, choices))}; got {_show(value)}"
    listed = len(choices) <= _MAX_LISTED_CHOICES
    text = f"{phrases.UNKNOWN_VALUE.get(str(field), 'unknown value')} {quote(value)}"
    if listed:
        text += f" (expected one of: {', '.join(choices)})"
    else:
        text += f" (not one of the {len(choices)} allowed values)"
    return text + hint(value, [c for c in choices if isinstance(c, str)], listed=True)


def _show(value: Any, limit: int = 60) -> str:
    """A short JSON rendering of a value for messages."""
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError, RecursionError):
        text = "(" + type(value).__name__ + ")"
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------------------------------------------
# Semantic checks
# ---------------------------------------------------------------------------------------------------------

def _semantic_checks(document: dict[str, Any], path: Path) -> None:
    """Raise :class:`ScenarioError` for the first problem of the checks a schema cannot express: phase by
    phase (:data:`~vkcore.scenario.checking.PHASES`), the validator's own checks of each phase, then each
    resource's and each command's kind's, in file order."""
    ctx = CheckContext(path=path, resources=[_entry("resources", i, item) for i, item in enumerate(document["resources"])],
                       commands=[_entry("commands", i, item) for i, item in enumerate(document["commands"])])
    for phase in PHASES:
        for place, message in _phase_problems(ctx, phase):
            raise ScenarioError(message, file=path, place=place)


def _entry(section: str, index: int, item: dict[str, Any]) -> Entry:
    (key, body), = item.items()
    if section == "resources":
        return Entry(section, index, key, key, MODEL_RESOURCES[key], body)
    kind = COMMAND_ALIASES.get(key, key)
    return Entry(section, index, key, kind, MODEL_COMMANDS[kind], body)


def _phase_problems(ctx: CheckContext, phase: str) -> Iterator[Problem]:
    whole = _DOCUMENT_CHECKS.get(phase)
    if whole is not None:
        yield from whole(ctx)
    default = _ENTRY_CHECKS.get(phase)
    for entry in (*ctx.resources, *ctx.commands):
        own = checks_of(entry.model).get(phase)
        if default is not None and not (own is not None and phase in _KIND_REPLACES):
            yield from default(ctx, entry)
        if own is not None:
            yield from own(ctx, entry)


def deprecations(document: dict[str, Any], path: Path) -> list[str]:
    """The reference runner's deprecation warnings for a valid ``document``, one line each, once per
    scenario: ``mark_boundary`` (use ``frame_boundary``), ``dispatch_graph`` (use ``dispatch_vgf``), frame
    ids given by hand (frames are then numbered in order), and a buffer's ``format`` (ignored, as there). For the commands that read a user's scenario (run, record), not for replays of
    a trace's."""
    commands = [(i, *next(iter(item.items()))) for i, item in enumerate(document.get("commands", []))]
    out = []
    for old, new in (("mark_boundary", "frame_boundary"), ("dispatch_graph", "dispatch_vgf")):
        uses = [i for i, kind, _ in commands if kind == old]
        if uses:
            more = f" (and {len(uses) - 1} more)" if len(uses) > 1 else ""
            out.append(f"{path}: {json_path('commands', uses[0], old)}: '{old}' is deprecated; use '{new}'{more}")
    ids = [(i, kind) for i, kind, body in commands if kind in ("mark_boundary", "frame_boundary") and "frame_id" in body]
    if ids:
        more = f" (and {len(ids) - 1} more)" if len(ids) > 1 else ""
        out.append(f"{path}: {json_path('commands', ids[0][0], ids[0][1])}.frame_id: setting frame ids by hand is "
                   f"deprecated; without them frames are numbered in order{more}")
    formats = [i for i, item in enumerate(document.get("resources", [])) if "format" in item.get("buffer", {})]
    if formats:  # the reference accepts the key and ignores it
        more = f" (and {len(formats) - 1} more)" if len(formats) > 1 else ""
        out.append(f"{path}: {json_path('resources', formats[0], 'buffer')}.format: ignored: a buffer has no format "
                   f"(the shader decides how its bytes are read){more}")
    return out


# ---------------------------------------------------------------------------------------------------------
# The checks that span kinds: uids, memory groups, references, paths, shader stages
# ---------------------------------------------------------------------------------------------------------

def _unique_uids(ctx: CheckContext) -> Iterator[Problem]:
    for entry in ctx.resources:
        uid = entry.body["uid"]
        first = ctx.by_uid.get(uid)
        if first is not None:
            yield entry.place("uid"), (f"{phrases.NOT_UNIQUE_UID}: {quote(uid)} is a duplicate (first defined at "
                                       f"{first.place()})")
        ctx.by_uid[uid] = entry


def _memory_groups(ctx: CheckContext) -> Iterator[Problem]:
    """The group is named by 'uid' or 'id' (not both); at most one resource of a group has a src."""
    first_src: dict[str, Entry] = {}
    for entry in ctx.resources:
        group = entry.body.get("memory_group")
        if group is None:
            continue
        if "uid" in group and "id" in group:
            yield entry.place("memory_group"), "name the group with 'uid' or 'id', not both"
        name = group.get("uid") or group.get("id") or ""
        if name and entry.body.get("src"):
            if name in first_src:
                yield entry.place("src"), (f"memory group {quote(name)} already takes its initial data from "
                                           f"{first_src[name].place('src')}; only one resource of a group may have a src")
            first_src[name] = entry


def _walk(body: Any, pattern: tuple[str, ...], parts: tuple[str | int, ...] = ()) -> Iterator[
        tuple[tuple[str | int, ...], str]]:
    """Yield (path, value) for every non-empty string at ``pattern`` ("*" = each list item) inside ``body``."""
    if not pattern:
        if isinstance(body, str) and body:
            yield parts, body
        return
    head, rest = pattern[0], pattern[1:]
    if head == "*":
        if isinstance(body, list):
            for i, item in enumerate(body):
                yield from _walk(item, rest, parts + (i,))
    elif isinstance(body, dict) and head in body:
        yield from _walk(body[head], rest, parts + (head,))


def _expected(kinds: Sequence[str]) -> str:
    """``a buffer, image or tensor`` for ("buffer", "image", "tensor")."""
    first = noun(kinds[0])
    if len(kinds) == 1:
        return first
    return ", ".join([first, *kinds[1:-1]]) + " or " + kinds[-1]


def _ref_problems(ctx: CheckContext, place: str, uid: str, allowed: Sequence[str]) -> Iterator[Problem]:
    target = ctx.by_uid.get(uid)
    if target is None:
        candidates = [u for u, e in ctx.by_uid.items() if e.kind in allowed]
        said = phrases.NOT_FOUND.get(tuple(allowed))
        yield place, (f"{said}: " if said else "") + f"unknown resource {quote(uid)}" + hint(uid, candidates, listed=False)
    elif target.kind not in allowed:
        yield place, f"{quote(uid)} is {noun(target.kind)}, expected {_expected(allowed)}"


def _references(ctx: CheckContext) -> Iterator[Problem]:
    """Every uid a resource or command names is a resource of a kind its model allows there (``REFS``)."""
    for entry in (*ctx.resources, *ctx.commands):
        for pattern, allowed in _refs(entry.model):
            for parts, uid in _walk(entry.body, pattern):
                yield from _ref_problems(ctx, entry.place(*parts), uid, allowed)


def _refs(model: type) -> RefRules:
    """The model's ``REFS``, DATA expanded to the kinds that hold data."""
    return tuple((path, tuple(k for name in kinds for k in (MEMORY_KINDS if name == DATA else (name,))))
                 for path, kinds in model.REFS)


def _nul_in_paths(ctx: CheckContext, entry: Entry) -> Iterator[Problem]:
    """No src or dst holds a NUL (no file system can name such a file; the OS would refuse it late)."""
    if entry.section != "resources":
        return
    for name in ("src", "dst"):
        if "\0" in str(entry.body.get(name, "")):
            yield entry.place(name), "holds a NUL character"


def _src_file(ctx: CheckContext, entry: Entry) -> Iterator[Problem]:
    """The src of a resource whose model has a ``SRC`` can be read."""
    if entry.section == "resources" and entry.model.SRC is not None:
        yield from src_problems(ctx, entry)


def _shader_stages(ctx: CheckContext) -> Iterator[Problem]:
    """Each command runs shaders of the stage it needs (its model's ``SHADER_STAGES``; compute by default)."""
    for entry in ctx.commands:
        for field_name, wanted in entry.model.SHADER_STAGES:
            shader = ctx.target(entry.body[field_name])
            stage = shader.get("stage", "compute")
            if stage != wanted:
                yield entry.place(field_name), (f"shader {quote(shader['uid'])} is a {stage} shader; {entry.key} needs a "
                                                f"{wanted} shader here")


# The validator's own checks, by phase: of the whole document, and of each entry (before its kind's).
_DOCUMENT_CHECKS: dict[str, Callable[[CheckContext], Iterator[Problem]]] = {
    "uids": _unique_uids, "memory_groups": _memory_groups, "references": _references, "shader_stages": _shader_stages,
}
_ENTRY_CHECKS: dict[str, Check] = {"paths": _nul_in_paths, "files": _src_file}
# Phases where a kind's own check replaces the validator's (a shader's files check may excuse a missing src).
_KIND_REPLACES = frozenset({"files"})
