"""The caps a trace reader holds every declared size and depth to: one table, as data.

A trace may come from a stranger, so nothing it declares is allocated, decoded or walked before it is
checked against these caps *and* against what the file can hold. docs/trace-format.md, section 9,
lists the same values; change both together. Each cap is a default that TraceReader's arguments may
raise for a file the user trusts.
"""
from __future__ import annotations

import re
from itertools import accumulate
from typing import Any, Final

#: the largest raw (decoded) blob: a snapshot of the largest resource a scenario may hold.
MAX_BLOB_BYTES: Final = 4 << 30
#: the largest META payload. vkcap's largest META (a scenario's JSON, twice) is a few hundred KiB;
#: a META is decoded into Python objects at up to ~100x its size, so this also bounds that.
MAX_META_BYTES: Final = 16 << 20
#: the largest INDEX payload (about 40 bytes per blob and 20 per META: 25 million records).
MAX_INDEX_BYTES: Final = 1 << 30
#: the most arrays, maps and elements (array items, map keys and values) one META may hold: what bounds
#: its decoded size when its bytes are small items (an empty array costs 1 byte to store and ~64 to
#: hold). A frame's dispatch-level snapshot takes about 10: 100,000 of them fit.
MAX_META_ITEMS: Final = 1 << 20
#: the deepest nesting of arrays and maps in a META, and of arrays and objects in the scenario JSON a
#: trace holds. vkcap writes at most 6 levels; Python's own recursion (json, repr) fails near 1,000.
MAX_NESTING: Final = 64
#: the most a zstd frame expands: a 128 KiB block stored as one repeated byte takes 4 bytes (an RLE
#: block's 3-byte header and the byte). A frame of N bytes therefore never decodes to more than
#: N * 32768 bytes, whatever its header says: a blob, plane or residual declaring more is refused
#: before anything is allocated for it.
ZSTD_MAX_RATIO: Final = 32768
#: zstd window limit for decoding (zstd's own default limit, 2**27): the decoder's working memory.
ZSTD_MAX_WINDOW: Final = 1 << 27
#: the most DELTA blobs that decoding one blob may decode (its delta closure); see records.py.
DELTA_MAX_BLOBS: Final = 32
#: the largest payload a record header may declare (2**62): larger values are corruption.
MAX_PAYLOAD_LEN: Final = 1 << 62
#: the most lost frames (damaged or missing FRAME records) a trace is said to lack, listed one by one:
#: a forged END record could count billions.
MAX_LOST_LISTED: Final = 1 << 16


class NestingTooDeep(ValueError):
    """A document nests arrays or maps deeper than :data:`MAX_NESTING`."""


def zstd_can_hold(stored_len: int, raw_len: int) -> bool:
    """Whether ``stored_len`` bytes of zstd (a frame, or planes of frames) can decode to ``raw_len``."""
    return raw_len <= stored_len * ZSTD_MAX_RATIO


def check_nesting(obj: Any, limit: int = MAX_NESTING) -> None:
    """Raise :class:`NestingTooDeep` if lists, tuples and dicts nest more than ``limit`` deep in ``obj``.
    Iterative (no recursion to exhaust), and it visits only containers: a cost of one step per element."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        items = node.values() if isinstance(node, dict) else node if isinstance(node, (list, tuple)) else None
        if items is None:
            continue
        if depth > limit:
            raise NestingTooDeep(f"nests deeper than {limit} levels")
        stack.extend((v, depth + 1) for v in items if isinstance(v, (list, tuple, dict)))


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP: Final = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_nesting(text: str) -> int:
    """How deep arrays and objects nest in JSON ``text``, found before ``json.loads`` (whose recursion a
    deep document exhausts): strings are removed, then the brackets are counted. Text that is not JSON
    gives some number; ``json.loads`` refuses it afterwards."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(accumulate(map(_DEPTH_STEP.__getitem__, brackets), initial=0))


def check_json_nesting(text: str, limit: int = MAX_NESTING) -> None:
    """Raise :class:`NestingTooDeep` if JSON ``text`` nests more than ``limit`` deep."""
    if text.count("[") + text.count("{") > limit and json_nesting(text) > limit:
        raise NestingTooDeep(f"nests deeper than {limit} levels")
