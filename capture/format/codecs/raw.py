"""Codec 0 (NONE): the raw bytes stored as they are."""
from __future__ import annotations

from typing import Any, Final

from ..records import Codec as Id
from .base import Buffer, CodecError, Coding, Decoding


class Raw:
    name: Final = "NONE"
    blob_id: Final = int(Id.NONE)
    residual_id: Final = int(Id.NONE)

    def encode(self, view: memoryview, coding: Coding) -> list[Any]:
        return [view]

    def decode(self, stored: Buffer, raw_len: int, decoding: Decoding) -> bytes | memoryview:
        if len(stored) != raw_len:
            raise CodecError(f"{len(stored)} raw bytes stored for {raw_len}")
        return stored  # type: ignore[no-any-return]

    def max_stored_len(self, raw_len: int) -> int:
        return raw_len

    def max_decoded_len(self, stored_len: int) -> int | None:
        return stored_len


CODEC: Final = Raw()
