"""The creation time written into trace headers and trim provenance.

``SOURCE_DATE_EPOCH`` (the reproducible-builds convention: whole seconds since 1970, UTC) replaces the
clock when it is set, so that recording the same scenario twice with the same arguments gives the same
bytes; tests/test_golden_traces.py relies on it. A value that is not a whole non-negative number of
seconds is ignored, as the convention asks.
"""
from __future__ import annotations

import datetime
import os


def creation_time() -> str:
    """Now, or ``SOURCE_DATE_EPOCH``, as an ISO 8601 UTC time to the second."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    moment = datetime.datetime.now(datetime.timezone.utc)
    if epoch.isdigit() and len(epoch) <= 12:
        moment = datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc)
    return moment.isoformat(timespec="seconds")
