"""The codecs of a trace's blobs, one module each, and the one table they are looked up in.

=========  ========  ============  ======================================================
codec      blob id   residual id   stores
=========  ========  ============  ======================================================
NONE       0         0             the raw bytes (:mod:`.raw`)
ZSTD       1         1             one zstd frame (:mod:`.zstd`)
PLANES     2         2             byte planes, each raw or zstd (:mod:`.planes`)
DELTA      3         --            a residual against earlier blobs (:mod:`.delta`)
SPARSE     --        3             a residual's non-zero elements and their bitmap (:mod:`.sparse`)
=========  ========  ============  ======================================================

A *blob id* is what a BLOB header's codec field says (:class:`capture.format.records.Codec`); a
*residual id* what a DELTA header's residual codec says. Each codec follows :class:`.base.Codec`:
``encode``, ``decode``, ``max_stored_len`` and ``max_decoded_len``. Adding a codec is its module and a
line in :data:`CODECS` (and its id in the format's spec, docs/trace-format.md).
"""
from __future__ import annotations

from typing import Any, Final

import zstandard

from . import delta, planes, raw, sparse, zstd
from .base import Codec, CodecError, Coding, Decoding, can_hold

__all__ = ["CODECS", "Codec", "CodecError", "Coding", "Decoding", "blob", "residual", "fits", "decoding",
           "max_stored_len"]

#: every codec, once
CODECS: Final[tuple[Codec, ...]] = (raw.CODEC, zstd.CODEC, planes.CODEC, delta.CODEC, sparse.CODEC)
_BY_BLOB_ID: Final = {c.blob_id: c for c in CODECS if c.blob_id is not None}
_BY_RESIDUAL_ID: Final = {c.residual_id: c for c in CODECS if c.residual_id is not None}
#: the ids a BLOB header and a DELTA header may name
BLOB_IDS: Final = frozenset(_BY_BLOB_ID)
RESIDUAL_IDS: Final = frozenset(_BY_RESIDUAL_ID)


def blob(codec_id: int) -> Codec:
    """The codec of BLOB codec id ``codec_id``; KeyError for an id no blob may have."""
    return _BY_BLOB_ID[codec_id]


def residual(codec_id: int) -> Codec:
    """The codec of DELTA residual codec id ``codec_id``; KeyError for an id no residual may have."""
    return _BY_RESIDUAL_ID[codec_id]


def max_stored_len(raw_len: int, codec_id: int) -> int:
    """The largest stored length a conforming writer produces for ``raw_len`` bytes with blob codec
    ``codec_id``: NONE stores exactly ``raw_len`` bytes, a ZSTD frame is never larger than zstd's
    compress bound, and a writer keeps PLANES and DELTA only when they are smaller than the raw bytes."""
    return blob(codec_id).max_stored_len(raw_len)


def fits(stored_len: int, raw_len: int, codec_id: int) -> bool:
    """Whether ``stored_len`` stored bytes can decode to ``raw_len`` bytes with blob codec ``codec_id``
    (:func:`.base.can_hold`): readers check this before they allocate anything for the raw bytes, so
    neither a stored length nor a raw one can exceed what the other allows."""
    return can_hold(blob(codec_id), stored_len, raw_len)


def decoding(dctx: zstandard.ZstdDecompressor, *, references: Any = ()) -> Decoding:
    """What decoding a blob is given: ``dctx``, and a DELTA's decoded references with the lookup of its
    residual's codec."""
    return Decoding(dctx, references=references, residual_codec=residual)
