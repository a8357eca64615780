"""Reading one suite result file (what ``suite run --results`` writes, what ``suite merge`` and
``suite bless`` read) as untrusted input: result folders travel between machines (CI artifacts, shards
from other teams).

Guarantees: the file is the folder's own (a link leading out of it is refused, before its target is
looked at), a regular file of bounded size (:mod:`replay.small_files`) holding strict JSON
(no NaN or Infinity, nesting bounded); every field has its type, every status and outcome is one vkcap
writes, every number is finite and inside its :data:`vkcore.bounded_numbers.BOUNDS` range. Anything else
is one :class:`~vkcore.errors.UsageError` naming the file and the key (exit 2). Keys vkcap does not know
are ignored (a newer vkcap may add some). A ``page`` that is neither a relative path inside the results
folder nor an http(s) URL is dropped with a warning naming the file, so no renderer ever gets a
``javascript:`` (or any other) link from a result file.
"""
from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from vkcore.bounded_numbers import check_number
from vkcore.errors import UsageError

from .manifest_paths import resolves_inside
from .small_files import read_small_text

log = logging.getLogger("vkcap")

RESULT_STATUSES = ("pass", "expected", "fixed", "flaky", "fail", "skip")
OUTCOMES = ("identical", "within", "diverged", "crash", "error", "skipped")
EXPECTED = ("pass", "diverged", "flaky", "skip", "crash")
TEXT_FIELDS = ("detail", "reason", "page", "driver", "host", "verdict", "pci_bus")
_DEVICE_UUID = re.compile(r"[0-9a-f]{0,32}")  # VkPhysicalDeviceIDProperties.deviceUUID in hex
#: numbers of a result, by field: the key of their bound
NUMBER_FIELDS = {"frames": "frames", "seconds": "seconds", "attempts": "attempts"}
#: what one attempt of a retried trace (``spread``) may hold: field -> a bound's key, or str
ATTEMPT_FIELDS: dict[str, str | type] = {"outcome": str, "first_divergence": "frame", "beyond_tolerance": "count",
                                         "max_ulp": "count", "detail": str}
MAX_ATTEMPTS = 11  # 1 + the most retries (vkcore.bounded_numbers.BOUNDS["retries"])
MAX_RESOURCES = 4096  # resource verdicts (and expected resources) of one result
MAX_FIELDS = 4096  # field verdicts of one resource (capture.views.MAX_PARTS)
#: what one resource's (or field's) verdict (replay.verdicts) may hold: field -> a bound's key, or str
VERDICT_FIELDS: dict[str, str | type] = {"uid": str, "name": str, "dtype": str, "tolerance": str, "status": str,
                                         "first_frame": "frame", "frames_beyond": "frames", "beyond_tolerance": "count",
                                         "differing": "count", "max_abs": "magnitude", "max_ulp": "count"}
VERDICT_STATUSES = ("identical", "within tolerance", "DIVERGED")
# a page vkcap writes into a results folder: result_stem's characters (vkcore.output_folders.unique_stem:
# ASCII letters and digits, "_", "-", ".", "+", "~"; letters of any script in older files), one level or
# a few below; no ":" (a scheme), no "/" first, no "\\", no space or control
_PAGE_PATH = re.compile(r"[\w.+~-]+(/[\w.+~-]+)*")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_result_file(path: Path, folder: Path) -> dict[str, Any]:
    """The fields of the result file ``path`` (in the results folder ``folder``) as
    :class:`replay.suite.TraceResult` takes them, checked as the module says; ``page`` made a path
    under ``folder`` (or kept as a URL, or dropped)."""
    if not resolves_inside(path, folder.resolve()):  # a result file is the folder's own, never a host file
        raise UsageError("is a link leading outside the results folder: not read", file=path)
    text = read_small_text(path, "suite result file")
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise UsageError("not a suite result file: nested too deeply", file=path) from None
    except ValueError as exc:  # JSONDecodeError, NaN, an integer of thousands of digits
        raise UsageError(f"not a suite result file: {exc}", file=path) from None
    if not isinstance(data, dict):
        raise UsageError(f"not a suite result file: a JSON object is expected, got {type(data).__name__}", file=path)
    fields: dict[str, Any] = {
        "trace": _text(data, "trace", path, required=True),
        "device": _text(data, "device", path, required=True),
        "status": _choice(data, "status", RESULT_STATUSES, path),
        "outcome": _choice(data, "outcome", OUTCOMES, path),
        "expected": _choice(data, "expected", EXPECTED, path),
    }
    for key in TEXT_FIELDS:
        if key in data:
            fields[key] = _text(data, key, path)
    if "device_uuid" in data:
        fields["device_uuid"] = _text(data, "device_uuid", path)
        if not _DEVICE_UUID.fullmatch(fields["device_uuid"]):
            raise UsageError(f"must be at most 32 hex digits, got {_shown(fields['device_uuid'])}", file=path,
                             place="device_uuid")
    if data.get("device_index") is not None:
        fields["device_index"] = check_number("device_index", data["device_index"], file=str(path), place="device_index")
    for key, bound in NUMBER_FIELDS.items():
        if key in data:
            fields[key] = check_number(bound, data[key], file=str(path), place=key)
    for key in ("first_divergence", "expected_frame"):
        if data.get(key) is not None:
            fields[key] = check_number("frame", data[key], file=str(path), place=key)
    if "expected_resources" in data:
        fields["expected_resources"] = _texts(data["expected_resources"], path, "expected_resources")
    if "resources" in data:
        fields["resources"] = _verdicts(data["resources"], path, "resources", "uid")
    if "spread" in data:
        fields["spread"] = _spread(data["spread"], path)
    if fields.get("page"):
        fields["page"] = safe_page(fields["page"], path, folder)
    return fields


def _text(data: dict[str, Any], key: str, path: Path, required: bool = False) -> str:
    if key not in data and not required:
        return ""
    value = data.get(key)
    if not isinstance(value, str):
        raise UsageError(f"must be a string, got {_shown(value)}", file=path, place=key)
    if not value.isascii() and not _encodable(value):  # JSON's "\ud83d" alone: no character at all
        raise UsageError("must be text (it holds a lone UTF-16 surrogate)", file=path, place=key)
    return value


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _choice(data: dict[str, Any], key: str, choices: tuple[str, ...], path: Path) -> str:
    value = data.get(key)
    if value not in choices:
        raise UsageError(f"must be one of {', '.join(choices)}, got {_shown(value)}", file=path, place=key)
    return str(value)


def _spread(value: Any, path: Path) -> list[dict[str, Any]]:
    if not isinstance(value, list) or len(value) > MAX_ATTEMPTS:
        raise UsageError(f"must be a list of at most {MAX_ATTEMPTS} attempts, got {_shown(value)}", file=path, place="spread")
    out = []
    for i, attempt in enumerate(value):
        place = f"spread[{i}]"
        if not isinstance(attempt, dict):
            raise UsageError(f"must be an object, got {_shown(attempt)}", file=path, place=place)
        checked: dict[str, Any] = {}
        for key, kind in ATTEMPT_FIELDS.items():
            if attempt.get(key) is None:
                continue
            if kind is str:
                checked[key] = _text(attempt, key, path)
            else:
                checked[key] = check_number(str(kind), attempt[key], file=str(path), place=f"{place}.{key}")
        if checked.get("outcome", "error") not in OUTCOMES:
            raise UsageError(f"must be one of {', '.join(OUTCOMES)}, got {_shown(checked['outcome'])}", file=path,
                             place=f"{place}.outcome")
        out.append(checked)
    return out


def _texts(value: Any, path: Path, place: str) -> list[str]:
    if not isinstance(value, list) or len(value) > MAX_RESOURCES:
        raise UsageError(f"must be a list of at most {MAX_RESOURCES} strings, got {_shown(value)}", file=path, place=place)
    return [_text({place: v}, place, path, required=True) for v in value]


def _verdicts(value: Any, path: Path, place: str, name_key: str, depth: int = 0) -> list[dict[str, Any]]:
    """Resource verdicts (``name_key`` ``uid``) or a struct's field verdicts (``name``, one level
    below), each key of its type and bound; unknown keys dropped."""
    limit = MAX_RESOURCES if depth == 0 else MAX_FIELDS
    if not isinstance(value, list) or len(value) > limit:
        raise UsageError(f"must be a list of at most {limit} objects, got {_shown(value)}", file=path, place=place)
    out = []
    for i, entry in enumerate(value):
        where = f"{place}[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get(name_key), str):
            raise UsageError(f"must be an object with a {name_key}, got {_shown(entry)}", file=path, place=where)
        checked: dict[str, Any] = {}
        for key, kind in VERDICT_FIELDS.items():
            if entry.get(key) is None:
                if key in entry and key == "first_frame":  # none: never beyond its tolerance
                    checked[key] = None
                continue
            if kind is str:
                checked[key] = _text(entry, key, path, required=True) if key in entry else ""
                if key == "status" and checked[key] not in VERDICT_STATUSES:
                    raise UsageError(f"must be one of {', '.join(VERDICT_STATUSES)}, got {_shown(checked[key])}",
                                     file=path, place=f"{where}.status")
            else:
                checked[key] = check_number(str(kind), entry[key], file=str(path), place=f"{where}.{key}")
        if depth == 0 and entry.get("fields") is not None:
            checked["fields"] = _verdicts(entry["fields"], path, f"{where}.fields", "name", 1)
        out.append(checked)
    return out


def safe_page(page: str, path: Path, folder: Path) -> str:
    """``page`` as a link a report may hold: a relative path inside ``folder`` (returned as a path under
    it) or an http(s) URL (returned as it is); anything else is dropped (``""``) with a warning naming
    the result file ``path``."""
    if is_web_url(page):
        return page
    if _PAGE_PATH.fullmatch(page) and not {".", ".."} & set(page.split("/")):
        return str(folder / page)
    log.warning("%s: page: dropped %s: neither a relative path inside the results folder nor an http(s) URL",
                path, ascii(page[:80]))
    return ""


def is_web_url(text: str) -> bool:
    """Whether ``text`` is an http(s) URL with a host and no spaces or control characters."""
    if not text.isascii() or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in text):
        return False
    try:
        parts = urlsplit(text)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def _shown(value: Any) -> str:
    text = "nothing" if value is None else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
