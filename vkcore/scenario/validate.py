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
- Integers must be JSON integers: ``40.0`` is rejected where the schema says integer.
"""
from __future__ import annotations

import difflib
import hashlib
import json
import logging
import os
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from ..errors import ScenarioError, json_path
from .npyio import NpyFormatError, NpyHeader, read_header
from . import reference_phrases as phrases
from .model import COMMAND_ALIASES, COMMAND_KINDS as MODEL_COMMANDS, DATA, OPTICAL_FLOW_ROLES, RESOURCE_KINDS as MODEL_RESOURCES, RefRules

log = logging.getLogger("vkcap.validate")

SCHEMA_RESOURCE = "scenario/schema/scenario.schema.json"
MEMORY_KINDS = tuple(kind for kind, cls in MODEL_RESOURCES.items() if cls.HOLDS_DATA)  # buffer, image, tensor

# ---------------------------------------------------------------------------------------------------------
# Data tables
# ---------------------------------------------------------------------------------------------------------

# Where each kind names other resources (the model classes say, DATA expanded to the kinds that hold data).
def _expand(rules: RefRules) -> RefRules:
    return tuple((path, tuple(k for name in kinds for k in (MEMORY_KINDS if name == DATA else (name,))))
                 for path, kinds in rules)


RESOURCE_REFS: dict[str, RefRules] = {kind: _expand(cls.REFS) for kind, cls in MODEL_RESOURCES.items() if cls.REFS}
COMMAND_REFS: dict[str, RefRules] = {kind: _expand(cls.REFS) for kind, cls in MODEL_COMMANDS.items()}
# Resource kinds whose ``src`` names a file to read, and whether that file must be a .npy file.
SRC_KINDS: dict[str, bool] = {kind: cls.SRC == "npy" for kind, cls in MODEL_RESOURCES.items() if cls.SRC is not None}
# Bytes per element of each tensor format (the .npy ``src`` of a tensor must use elements of this size).
TENSOR_ELEMENT_SIZE: dict[str, int] = {
    "VK_FORMAT_R8_BOOL_ARM": 1, "VK_FORMAT_R8_UINT": 1, "VK_FORMAT_R8_SINT": 1, "VK_FORMAT_R16_UINT": 2,
    "VK_FORMAT_R16_SINT": 2, "VK_FORMAT_R32_UINT": 4, "VK_FORMAT_R32_SINT": 4, "VK_FORMAT_R64_SINT": 8,
    "VK_FORMAT_R16_SFLOAT": 2, "VK_FORMAT_R32_SFLOAT": 4, "VK_FORMAT_R16_SFLOAT_FPENCODING_BFLOAT16_ARM": 2,
    "VK_FORMAT_R8_SFLOAT_FPENCODING_FLOAT8E4M3_ARM": 1, "VK_FORMAT_R8_SFLOAT_FPENCODING_FLOAT8E5M2_ARM": 1,
}
# Reference-runner names of commands vkcap does not take, with vkcap's spelling (same fields); none now.
RENAMED_KINDS: dict[str, str] = {}
CUSTOM_BORDER_COLORS = ("FLOAT_CUSTOM_EXT", "INT_CUSTOM_EXT")
IMAGE_ARRAY_LAYERS = 1  # images are created with one array layer, like the reference runner

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
        from importlib.resources import files

        _schema_bytes_cache = files("vkcore").joinpath(SCHEMA_RESOURCE).read_bytes()
    return _schema_bytes_cache


def _version_tag() -> bytes:
    """What identifies this validator: vkcap's version (when known without cost) and this module's source."""
    parts = [str(getattr(sys.modules.get("vkcap"), "__version__", "")),
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
        from jsonschema import Draft202012Validator, validators

        def is_integer(_checker: Any, instance: Any) -> bool:
            return isinstance(instance, int) and not isinstance(instance, bool)

        checker = Draft202012Validator.TYPE_CHECKER.redefine("integer", is_integer)
        strict = validators.extend(Draft202012Validator, type_checker=checker)
        _validator_cache = strict(json.loads(_schema_bytes()))
    return _validator_cache


def _schema_pass(document: dict[str, Any], path: Path) -> None:
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
                return place, f"unknown {what} kind {_quote(extra)}; vkcap spells it {_quote(RENAMED_KINDS[extra])}"
            return place, f"unknown {what} kind {_quote(extra)} (expected one of: {', '.join(allowed)})" + _hint(
                extra, allowed, listed=True)
        hint = _hint(extra, allowed, listed=False)
        if not hint and len(allowed) <= _MAX_LISTED_CHOICES:
            hint = f" (allowed: {', '.join(allowed)})"
        return place, f"unknown field {_quote(extra)}{hint}"
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
        shown = _quote(twice) if isinstance(twice, str) else _show(twice)
        return place, f"each value may appear once, {shown} appears {value.count(twice)} times"
    return place, error.message


def _enum_message(value: Any, choices: list[Any], field: str | int = "") -> str:
    """``unknown value 'x' (expected one of: ...)``, in the reference's words where it has some for ``field``
    (:data:`~vkcore.scenario.reference_phrases.UNKNOWN_VALUE`: ``Unknown tiling value 'x' (...)``)."""
    if not isinstance(value, str):
        return f"must be one of: {', '.join(map(str, choices))}; got {_show(value)}"
    listed = len(choices) <= _MAX_LISTED_CHOICES
    text = f"{phrases.UNKNOWN_VALUE.get(str(field), 'unknown value')} {_quote(value)}"
    if listed:
        text += f" (expected one of: {', '.join(choices)})"
    else:
        text += f" (not one of the {len(choices)} allowed values)"
    return text + _hint(value, [c for c in choices if isinstance(c, str)], listed=True)


def _hint(word: str, candidates: Sequence[str], *, listed: bool) -> str:
    """``; did you mean 'x'?`` (or ``(did you mean 'x'?)``) when ``word`` is close to a candidate."""
    prefix = os.path.commonprefix(list(candidates)) if len(candidates) > 1 else ""
    if not word.startswith(prefix):
        prefix = ""
    by_rest = {c[len(prefix):]: c for c in candidates}  # compare what differs: "R32_SFLOAT", not "VK_FORMAT_..."
    close = [by_rest[c] for c in difflib.get_close_matches(word[len(prefix):], list(by_rest), n=1, cutoff=0.6)]
    if not close:
        close = [c for c in candidates if c.lower() == word.lower()]
    if not close:
        return ""
    if listed:
        return f"; did you mean {_quote(close[0])}?"
    return f" (did you mean {_quote(close[0])}?)"


def _quote(text: str) -> str:
    """``'text'`` with control characters escaped, so a message stays one line."""
    return "'" + "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text) + "'"


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

@dataclass(frozen=True)
class _Entry:
    """One resource of the document."""

    index: int
    kind: str
    body: dict[str, Any]

    def place(self, *parts: str | int) -> str:
        return json_path("resources", self.index, self.kind, *parts)


@dataclass
class _Context:
    """What the semantic checks share: the document, its resources by uid, file facts learned on the way."""

    path: Path
    resources: list[_Entry]
    commands: list[tuple[int, str, dict[str, Any]]]
    by_uid: dict[str, _Entry] = field(default_factory=dict)
    npy: dict[str, NpyHeader] = field(default_factory=dict)  # uid -> header of its .npy src
    _headers: dict[Path, NpyHeader] = field(default_factory=dict)

    def header(self, path: Path) -> NpyHeader:
        """The .npy header of ``path``, read once per validation however many resources name the file."""
        if path not in self._headers:
            self._headers[path] = read_header(path)
        return self._headers[path]

    def fail(self, place: str, message: str) -> None:
        raise ScenarioError(message, file=self.path, place=place)

    def resolve(self, relative: str) -> Path:
        """Resolve a ``src``-like path: absolute as is, else against the scenario's folder."""
        p = Path(relative)
        return p if p.is_absolute() else self.path.parent / p


def _semantic_checks(document: dict[str, Any], path: Path) -> None:
    ctx = _Context(
        path=path,
        resources=[_Entry(i, *next(iter(item.items()))) for i, item in enumerate(document["resources"])],
        commands=[(i, *next(iter(item.items()))) for i, item in enumerate(document["commands"])],
    )
    for check in _CHECKS:
        check(ctx)


def _check_deprecated(ctx: _Context) -> None:
    """What the reference runner refuses as deprecated, refused the same way."""
    for entry in ctx.resources:
        if entry.kind == "tensor" and "alias_target" in entry.body:
            ctx.fail(entry.place("alias_target"), "the alias_target field is deprecated and refused (as the reference "
                                                  "runner refuses it): share memory with a memory_group instead")


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


def _check_unique_uids(ctx: _Context) -> None:
    for entry in ctx.resources:
        uid = entry.body["uid"]
        first = ctx.by_uid.get(uid)
        if first is not None:
            ctx.fail(entry.place("uid"), f"{phrases.NOT_UNIQUE_UID}: {_quote(uid)} is a duplicate (first defined at "
                                         f"{first.place()})")
        ctx.by_uid[uid] = entry


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


def _noun(kind: str) -> str:
    return ("an " if kind[0] in "aeiou" else "a ") + kind


def _expected(kinds: Sequence[str]) -> str:
    """``a buffer, image or tensor`` for ("buffer", "image", "tensor")."""
    first = _noun(kinds[0])
    if len(kinds) == 1:
        return first
    return ", ".join([first, *kinds[1:-1]]) + " or " + kinds[-1]


def _check_ref(ctx: _Context, place: str, uid: str, allowed: Sequence[str]) -> None:
    target = ctx.by_uid.get(uid)
    if target is None:
        candidates = [u for u, e in ctx.by_uid.items() if e.kind in allowed]
        said = phrases.NOT_FOUND.get(tuple(allowed))
        ctx.fail(place, (f"{said}: " if said else "") + f"unknown resource {_quote(uid)}"
                 + _hint(uid, candidates, listed=False))
    elif target.kind not in allowed:
        ctx.fail(place, f"{_quote(uid)} is {_noun(target.kind)}, expected {_expected(allowed)}")


def _check_references(ctx: _Context) -> None:
    for entry in ctx.resources:
        for pattern, allowed in RESOURCE_REFS.get(entry.kind, ()):
            for parts, uid in _walk(entry.body, pattern):
                _check_ref(ctx, entry.place(*parts), uid, allowed)
    for index, kind, body in ctx.commands:
        for pattern, allowed in COMMAND_REFS[COMMAND_ALIASES.get(kind, kind)]:
            for parts, uid in _walk(body, pattern):
                _check_ref(ctx, json_path("commands", index, kind, *parts), uid, allowed)


def _bindings_of(body: dict[str, Any]) -> list[tuple[str | int, dict[str, Any]]]:
    """A command's bindings with their keys: list positions, or roles (dispatch_optical_flow's object)."""
    bindings = body.get("bindings", ())
    if isinstance(bindings, dict):
        return [(role, bindings[role]) for role in OPTICAL_FLOW_ROLES if bindings.get(role)]
    return list(enumerate(bindings))


def _check_bindings(ctx: _Context) -> None:
    """Each (set, id) at most once per dispatch; an image's lod below its mip count."""
    for index, kind, body in ctx.commands:
        seen: dict[tuple[int, int], str | int] = {}
        for j, binding in _bindings_of(body):
            key = (binding["set"], binding["id"])
            place = json_path("commands", index, kind, "bindings", j)
            if key in seen:
                ctx.fail(place, f"binding set {key[0]}, id {key[1]} used twice ({json_path('bindings', seen[key])} and "
                                f"{json_path('bindings', j)})")
            seen[key] = j
            target = ctx.by_uid[binding["resource_ref"]]
            lod = binding.get("lod", 0)
            mips = target.body.get("mips", 1)
            if target.kind == "image" and lod >= mips:
                ctx.fail(json_path("commands", index, kind, "bindings", j, "lod"),
                         f"{phrases.LOD_BEYOND_MIPS}: image {_quote(target.body['uid'])} has {mips} mip "
                         f"level{'s' if mips != 1 else ''}, "
                         f"so lod must be below {mips}, got {lod}")


def _check_resource_fields(ctx: _Context) -> None:
    """Constraints between fields of one resource."""
    for entry in ctx.resources:
        body = entry.body
        if entry.kind == "shader":
            if body["type"] == "GLSL" and body.get("entry", "main") != "main":
                ctx.fail(entry.place("entry"), f"a GLSL shader's entry point must be 'main', got "
                                               f"{_quote(body['entry'])}")
            _unique_constant_ids(ctx, body.get("specialization_constants", ()), ("specialization_constants",),
                                 entry)
        elif entry.kind == "graph":
            for m, mapping in enumerate(body.get("specialization_constants_map", ())):
                _unique_constant_ids(ctx, mapping["specialization_constants"],
                                     ("specialization_constants_map", m, "specialization_constants"), entry)
        elif entry.kind == "image" and "custom_border_color" in body:
            color = body.get("border_color")
            if color not in CUSTOM_BORDER_COLORS:
                ctx.fail(entry.place("custom_border_color"),
                         f"needs border_color FLOAT_CUSTOM_EXT or INT_CUSTOM_EXT, got {color or 'none'}")
            if color == "INT_CUSTOM_EXT" and not all(isinstance(v, int) for v in body["custom_border_color"]):
                ctx.fail(entry.place("custom_border_color"), "must hold integers with border_color INT_CUSTOM_EXT")


def _unique_constant_ids(ctx: _Context, constants: Sequence[dict[str, Any]], parts: tuple[str | int, ...],
                         entry: _Entry) -> None:
    seen: dict[int, int] = {}
    for j, constant in enumerate(constants):
        cid = constant["id"]
        if cid in seen:
            ctx.fail(entry.place(*parts, j, "id"), f"specialization constant id {cid} is set twice "
                                                   f"({parts[-1]}[{seen[cid]}] and {parts[-1]}[{j}])")
        seen[cid] = j


def _check_memory_groups(ctx: _Context) -> None:
    """The group is named by 'uid' or 'id' (not both); at most one resource of a group has a src."""
    first_src: dict[str, _Entry] = {}
    for entry in ctx.resources:
        group = entry.body.get("memory_group")
        if group is None:
            continue
        if "uid" in group and "id" in group:
            ctx.fail(entry.place("memory_group"), "name the group with 'uid' or 'id', not both")
        name = group.get("uid") or group.get("id") or ""
        if name and entry.body.get("src"):
            if name in first_src:
                ctx.fail(entry.place("src"), f"memory group {_quote(name)} already takes its initial data from "
                                             f"{first_src[name].place('src')}; only one resource of a group may "
                                             "have a src")
            first_src[name] = entry


def _check_path_characters(ctx: _Context) -> None:
    """No path field holds a NUL (no file system can name such a file; the OS would refuse it late)."""
    for entry in ctx.resources:
        for name in ("src", "dst"):
            if "\0" in str(entry.body.get(name, "")):
                ctx.fail(entry.place(name), "holds a NUL character")
        for j, folder in enumerate(entry.body.get("include_dirs", ()) if entry.kind == "shader" else ()):
            if "\0" in str(folder):
                ctx.fail(entry.place("include_dirs", j), "holds a NUL character")


def _check_build_options(ctx: _Context) -> None:
    """A shader's build_options hold only what may reach the compiler (:mod:`vkcore.scenario.build_options`)."""
    from .build_options import build_options_problem

    for entry in ctx.resources:
        if entry.kind == "shader":
            problem = build_options_problem(entry.body.get("build_options", ""))
            if problem is not None:
                ctx.fail(entry.place("build_options"), problem)


def _check_files(ctx: _Context) -> None:
    """Every src exists (and .npy ones are readable); shader include folders exist."""
    for entry in ctx.resources:
        is_npy = SRC_KINDS.get(entry.kind)
        src = entry.body.get("src", "")
        if is_npy is not None and src:
            resolved = ctx.resolve(src)
            problem = _file_problem(resolved)
            if problem and entry.kind == "shader" and entry.body["uid"] not in _used_shaders(ctx):
                log.warning("%s: %s: %s; no command uses shader %s, so it is not compiled (as in the reference runner)",
                            ctx.path, entry.place("src"), problem, _quote(entry.body["uid"]))
            elif problem:
                glsl = entry.kind == "shader" and entry.body.get("type") == "GLSL"
                ctx.fail(entry.place("src"), f"{phrases.CANNOT_OPEN_GLSL if glsl else phrases.CANNOT_OPEN}: {problem}")
            if is_npy:
                try:
                    ctx.npy[entry.body["uid"]] = ctx.header(resolved)
                except NpyFormatError as exc:
                    ctx.fail(entry.place("src"), f"cannot read {resolved} as .npy: {exc}")
                except OSError as exc:
                    ctx.fail(entry.place("src"), f"cannot read {resolved}: {exc.strerror or exc}")
        if entry.kind == "shader":
            for j, folder in enumerate(entry.body.get("include_dirs", ())):
                resolved = ctx.resolve(folder)
                if not _is_dir(resolved):
                    ctx.fail(entry.place("include_dirs", j), f"include folder not found: {resolved}")


def _used_shaders(ctx: _Context) -> set[str]:
    """Uids of the shaders some command (or a graph's substitution) uses."""
    used = set()
    for _, _, body in ctx.commands:
        used.add(body.get("shader_ref", ""))
        used.update(s.get("shader_ref", "") for s in body.get("shader_substitutions", ()))
    for entry in ctx.resources:
        if entry.kind == "graph":
            used.update(s.get("shader_ref", "") for s in entry.body.get("shader_substitutions", ()))
    return used


def _file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be read as an input file, or None."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return f"file not found: {path}"
    except (OSError, ValueError) as exc:
        return f"cannot open {path}: {getattr(exc, 'strerror', None) or exc}"
    if stat.S_ISDIR(st.st_mode):
        return f"is a folder, not a file: {path}"
    if not stat.S_ISREG(st.st_mode):
        return f"not a regular file: {path}"
    return None


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _check_payload_sizes(ctx: _Context) -> None:
    """A buffer's src holds exactly 'size' bytes; a tensor's src has its dims and element size."""
    for entry in ctx.resources:
        header = ctx.npy.get(entry.body["uid"])
        if header is None:
            continue
        src = entry.body["src"]
        if entry.kind == "buffer" and header.nbytes != entry.body["size"]:
            ctx.fail(entry.place("size"), f"{phrases.SIZE_MISMATCH}: {entry.body['size']} bytes, but src {_quote(src)} holds "
                                          f"{header.nbytes} bytes of data (they must be equal)")
        if entry.kind == "tensor":
            dims = list(entry.body["dims"])
            if list(header.shape) != dims:
                ctx.fail(entry.place("src"), f"{_quote(src)} has shape {list(header.shape)} but dims are {dims}")
            fmt = entry.body["format"]
            need = TENSOR_ELEMENT_SIZE[fmt]
            if header.itemsize != need:
                ctx.fail(entry.place("src"), f"{_quote(src)} has {header.itemsize}-byte elements "
                                             f"({header.descr}) but {fmt} needs {need}-byte elements")


def _check_push_constants(ctx: _Context) -> None:
    """dispatch_compute: push data present exactly when the shader declares push constants, at most that size."""
    for index, kind, body in ctx.commands:
        if kind != "dispatch_compute":
            continue
        shader = ctx.by_uid[body["shader_ref"]].body
        size = shader.get("push_constants_size", 0)
        ref = body.get("push_data_ref", "")
        place = json_path("commands", index, kind)
        name = _quote(shader["uid"])
        if size > 0 and not ref:
            ctx.fail(place, f"shader {name} has push_constants_size {size} but no push_data_ref is given")
        if size == 0 and ref:
            ctx.fail(place + ".push_data_ref", f"shader {name} declares no push constants (push_constants_size 0)")
        if ref:
            header = ctx.npy[ref]
            if header.nbytes > size:
                src = ctx.by_uid[ref].body["src"]
                ctx.fail(place + ".push_data_ref",
                         f"raw_data {_quote(ref)} holds {header.nbytes} bytes ({src}), more than the push_constants_size {size} "
                         f"of shader {name} (shorter data is zero-padded, longer is refused)")


# Which shader stage each command's shader fields want (the model classes say).
SHADER_STAGES: dict[str, tuple[tuple[str, str], ...]] = {kind: cls.SHADER_STAGES for kind, cls in MODEL_COMMANDS.items()}


def _check_shader_stages(ctx: _Context) -> None:
    """Each command runs shaders of the stage it needs (``stage`` compute is the default)."""
    for index, kind, body in ctx.commands:
        for field_name, wanted in SHADER_STAGES.get(COMMAND_ALIASES.get(kind, kind), ()):
            shader = ctx.by_uid[body[field_name]].body
            stage = shader.get("stage", "compute")
            if stage != wanted:
                ctx.fail(json_path("commands", index, kind, field_name),
                         f"shader {_quote(shader['uid'])} is a {stage} shader; {kind} needs a {wanted} shader here")


def _check_spirv_graphs(ctx: _Context) -> None:
    """A dispatch_spirv_graph's graph is a SPIR-V shader resource (GLSL cannot hold a graph); its
    constants' .npy files hold their dims and element size."""
    for index, kind, body in ctx.commands:
        if COMMAND_ALIASES.get(kind, kind) != "dispatch_spirv_graph":  # or dispatch_data_graph
            continue
        shader = ctx.by_uid[body["graph_ref"]].body
        if shader.get("type") != "SPIR-V":
            ctx.fail(json_path("commands", index, kind, "graph_ref"),
                     f"shader {_quote(shader['uid'])} is {shader.get('type')}; a SPIR-V graph must be given as SPIR-V")
    for entry in ctx.resources:
        if entry.kind != "graph_constant":
            continue
        header = ctx.npy[entry.body["uid"]]
        dims, fmt = list(entry.body["dims"]), entry.body["format"]
        if list(header.shape) != dims:
            ctx.fail(entry.place("src"), f"{_quote(entry.body['src'])} has shape {list(header.shape)} but dims are {dims}")
        if header.itemsize != TENSOR_ELEMENT_SIZE[fmt]:
            ctx.fail(entry.place("src"), f"{_quote(entry.body['src'])} has {header.itemsize}-byte elements but {fmt} "
                                         f"needs {TENSOR_ELEMENT_SIZE[fmt]}-byte elements")


def _check_fragment_targets(ctx: _Context) -> None:
    """A dispatch_fragment draws into color attachments (images made for it, the lod one they have) or
    over a render_extent; its push data fits both shaders' push constants."""
    for index, kind, body in ctx.commands:
        if kind != "dispatch_fragment":
            continue
        place = json_path("commands", index, kind)
        refs = body.get("color_attachment_refs", ())
        if not refs and "render_extent" not in body:
            ctx.fail(place, "give color_attachment_refs or render_extent: a fragment pass needs an extent to draw over")
        for j, ref in enumerate(refs):
            uid, lod = (ref, 0) if isinstance(ref, str) else (ref["resource_ref"], ref.get("lod", 0))
            image = ctx.by_uid[uid].body
            if not image.get("color_attachment", False):
                ctx.fail(json_path("commands", index, kind, "color_attachment_refs", j),
                         f"image {_quote(uid)} is not a color attachment: set its color_attachment to true")
            if lod >= image.get("mips", 1):
                ctx.fail(json_path("commands", index, kind, "color_attachment_refs", j, "lod"),
                         f"image {_quote(uid)} has {image.get('mips', 1)} mip level(s), so lod must be below that")
        sizes = [ctx.by_uid[body[f]].body.get("push_constants_size", 0) for f in ("vertex_shader_ref", "fragment_shader_ref")]
        ref = body.get("push_data_ref", "")
        if ref and ctx.npy[ref].nbytes > max(sizes):
            ctx.fail(f"{place}.push_data_ref", f"raw_data {_quote(ref)} holds {ctx.npy[ref].nbytes} bytes, more than the "
                                               f"shaders' push_constants_size {max(sizes)}")


def _check_optical_flow(ctx: _Context) -> None:
    """A dispatch_optical_flow's images fit its width, height and grid at their lods, as the reference
    runner checks them (its words): search and template are width x height and of one format; flow
    vectors are the input divided by the grid, rounded up; hint and cost are the flow vectors' size.
    The mean-flow hint is 0 or below the larger side, as the reference requires."""
    for index, kind, body in ctx.commands:
        if kind != "dispatch_optical_flow":
            continue
        place = json_path("commands", index, kind)
        width, height = body["width"], body["height"]
        hint = body.get("mean_flow_l1_norm_hint", 0)
        if hint and hint >= max(width, height):
            ctx.fail(f"{place}.mean_flow_l1_norm_hint", f"must be 0 or below max(width, height) = {max(width, height)}, "
                                                        f"got {hint}")
        images = {role: (ctx.by_uid[b["resource_ref"]].body, b.get("lod", 0)) for role, b in _bindings_of(body)}

        def extent(role: str) -> tuple[int, int]:
            image, lod = images[role]
            return max(image["dims"][1] >> lod, 1), max(image["dims"][2] >> lod, 1)

        def fail(role: str, what: str) -> None:
            ctx.fail(f"{place}.bindings.{role}", what)

        grid = int(body["grid_size"].split("x")[0])
        output = (-(-width // grid), -(-height // grid))
        if extent("search_image") != (width, height):
            fail("search_image", f"image {_quote(images['search_image'][0]['uid'])} is {_wxh(extent('search_image'))} at "
                                 f"the bound lod; width and height say {width}x{height}")
        if extent("template_image") != extent("search_image"):
            fail("template_image", f"image {_quote(images['template_image'][0]['uid'])} is "
                                   f"{_wxh(extent('template_image'))} at the bound lod; the search image is "
                                   f"{_wxh(extent('search_image'))}")
        if images["template_image"][0]["format"] != images["search_image"][0]["format"]:
            fail("template_image", f"image {_quote(images['template_image'][0]['uid'])} is "
                                   f"{images['template_image'][0]['format']}; the search image is "
                                   f"{images['search_image'][0]['format']}")
        if extent("output_image") != output:
            fail("output_image", f"image {_quote(images['output_image'][0]['uid'])} is {_wxh(extent('output_image'))} at "
                                 f"the bound lod; a {width}x{height} input on a {body['grid_size']} grid gives "
                                 f"{_wxh(output)} flow vectors")
        for role in ("hint_motion_vectors", "output_cost"):
            if role in images and extent(role) != output:
                fail(role, f"image {_quote(images[role][0]['uid'])} is {_wxh(extent(role))} at the bound lod; the "
                           f"flow vectors are {_wxh(output)}")


def _wxh(extent: tuple[int, int]) -> str:
    return f"{extent[0]}x{extent[1]}"


def _check_barrier_ranges(ctx: _Context) -> None:
    """Buffer barriers stay inside their buffer; image barriers inside their image's mips and layers."""
    for entry in ctx.resources:
        body = entry.body
        if entry.kind == "buffer_barrier":
            buffer = ctx.by_uid[body["buffer_resource"]].body
            offset, size = body.get("offset", 0), body["size"]
            if offset + size > buffer["size"]:
                ctx.fail(entry.place(), f"offset {offset} + size {size} = {offset + size} exceeds the "
                                        f"{buffer['size']} bytes of buffer {_quote(buffer['uid'])}")
        elif entry.kind == "image_barrier":
            image = ctx.by_uid[body["image_resource"]].body
            rng = body.get("subresource_range", {})
            mips = image.get("mips", 1)
            base, count = rng.get("base_mip_level", 0), rng.get("level_count", 1)
            if base + count > mips:
                ctx.fail(entry.place("subresource_range"),
                         f"mip levels {base} to {base + count - 1} are outside image {_quote(image['uid'])}, "
                         f"which has {mips} mip level{'s' if mips != 1 else ''}")
            base, count = rng.get("base_array_layer", 0), rng.get("layer_count", 1)
            if base + count > IMAGE_ARRAY_LAYERS:
                ctx.fail(entry.place("subresource_range"),
                         f"array layers {base} to {base + count - 1} are outside image {_quote(image['uid'])}, "
                         f"which has {IMAGE_ARRAY_LAYERS} array layer")


# The order in which the checks run: the first failure is the one reported.
_CHECKS: tuple[Callable[[_Context], None], ...] = (
    _check_unique_uids,
    _check_deprecated,
    _check_memory_groups,
    _check_references,
    _check_bindings,
    _check_resource_fields,
    _check_path_characters,
    _check_build_options,
    _check_files,
    _check_payload_sizes,
    _check_push_constants,
    _check_shader_stages,
    _check_fragment_targets,
    _check_spirv_graphs,
    _check_optical_flow,
    _check_barrier_ranges,
)
