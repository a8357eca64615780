"""Reading a scenario file: JSON text to a validated, typed :class:`~vkcore.scenario.model.Scenario`.

``load_scenario(path)`` reads a scenario JSON file, validates it (JSON Schema, then the checks a schema
cannot express; see :mod:`vkcore.scenario.validate`) and returns a :class:`Scenario`. The model knows
nothing of files or validation; this module ties the three together.
"""
from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from ..errors import ScenarioError, json_path
from ..paths import read_regular
from .confine import check_confined
from .model import Scenario, scenario_from_document
from .validate import deprecations, parse_json_int, validate_document


def parse_json(text: str | bytes, path: Path) -> dict[str, Any]:
    """Parse JSON text, reporting a syntax error with its line and column. An integer too long for
    Python to read becomes a :class:`vkcore.scenario.validate.LongInteger`, which validation refuses at its
    JSON path."""
    try:
        doc = json.loads(text, parse_int=parse_json_int)
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"invalid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})", file=path) from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"invalid JSON: not UTF-8 text ({exc.reason})", file=path) from None
    except RecursionError:
        raise ScenarioError("invalid JSON: nested too deeply", file=path) from None
    if not isinstance(doc, dict):
        raise ScenarioError("the root must be a JSON object with 'resources' and 'commands'", file=path)
    if _SURROGATE_ESCAPE.search(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")):
        place = _lone_surrogate(doc, ())
        if place is not None:
            raise ScenarioError("holds a lone surrogate (\\ud800-\\udfff without its pair): not a character",
                                file=path, place=json_path(*place) or None)
    return doc


# A JSON escape of a UTF-16 surrogate: only then can a decoded string hold a lone one (which no file name,
# trace record or message can carry).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _lone_surrogate(node: Any, parts: tuple[str | int, ...]) -> tuple[str | int, ...] | None:
    """The JSON path of the first string (key or value) in ``node`` holding a lone surrogate, or None."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(node, parts)]
    while stack:
        value, where = stack.pop()
        if isinstance(value, str):
            if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
                return where
        elif isinstance(value, dict):  # pushed in reverse: popped, and so reported, in document order
            for key, item in reversed(value.items()):
                if any(0xD800 <= ord(c) <= 0xDFFF for c in key):
                    return (*where, key.encode("utf-8", "backslashreplace").decode("ascii"))
                stack.append((item, (*where, key)))
        elif isinstance(value, list):
            stack.extend((item, (*where, i)) for i, item in reversed(list(enumerate(value))))
    return None


#: The largest scenario file read (a scenario of many frames is large, yet JSON of more than this is no
#: scenario: ``run /dev/zero`` or a huge file is refused before it is read).
SCENARIO_LIMIT = 256 << 20


def load_scenario(path: str | Path, *, warn_deprecated: bool = False, confined: bool = False) -> Scenario:
    """Read, validate and model a scenario file. Raises :class:`ScenarioError` on any problem.
    ``warn_deprecated``: log the reference runner's deprecation warnings (for a user's own file).
    ``confined``: the scenario comes from a trace; every path in it must stay inside its folder, checked
    before validation looks at any file (:mod:`vkcore.scenario.confine`). Only a regular file of at most
    :data:`SCENARIO_LIMIT` bytes is read (a FIFO or a device is refused without blocking)."""
    p = Path(path)
    try:
        text = read_regular(p, SCENARIO_LIMIT)
    except FileNotFoundError:
        raise ScenarioError("no such file", file=p) from None
    except IsADirectoryError:
        raise ScenarioError("is a folder, not a scenario file", file=p) from None
    except OSError as exc:
        raise ScenarioError(f"cannot read: {exc.strerror}", file=p) from None
    except ValueError:  # a NUL in the path
        raise ScenarioError("cannot read: the path holds a NUL character", file=p) from None
    document = parse_json(text, p)
    if confined:
        check_confined(document, p)
    validate_document(document, p)
    if warn_deprecated:
        for line in deprecations(document, p):
            logging.getLogger("vkcap.scenario").warning("%s", line)
    return scenario_from_document(document, p.absolute(), confined=confined)
