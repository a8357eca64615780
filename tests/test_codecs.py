"""The codec table (capture/format/codecs): every id the layout names has exactly one codec, and the
bounds readers check agree with what each codec stores."""
from __future__ import annotations

import pytest

from capture.format import codecs
from capture.format.codecs import delta
from capture.format.records import Codec


def test_every_blob_and_residual_id_has_one_codec() -> None:
    assert codecs.BLOB_IDS == {int(c) for c in Codec}
    assert codecs.RESIDUAL_IDS == delta.INNER_CODECS
    assert len({c.name for c in codecs.CODECS}) == len(codecs.CODECS)


@pytest.mark.parametrize(("codec", "stored", "raw", "fits"), [
    (Codec.NONE, 10, 10, True), (Codec.NONE, 9, 10, False),
    (Codec.ZSTD, 1, 32768, True), (Codec.ZSTD, 1, 32769, False), (Codec.ZSTD, 1024 + 1, 1, True),
    (Codec.PLANES, 11, 10, False), (Codec.DELTA, 10, 10, True), (Codec.DELTA, 11, 10, False),
])
def test_fits_bounds_stored_and_raw_lengths(codec: Codec, stored: int, raw: int, fits: bool) -> None:
    assert codecs.fits(stored, raw, codec) is fits
