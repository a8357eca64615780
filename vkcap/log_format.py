"""The log's format: every record one ``vkcap: MESSAGE`` whose untrusted parts cannot reach the terminal raw."""
from __future__ import annotations

import logging
import os

from vkcore.safe_text import shown, shown_lines

#: The arguments escaped one by one (a number keeps its type, for ``%d`` and ``%.2f``); any other object
#: is escaped with the rest of the message.
TEXTUAL = (str, os.PathLike, BaseException)


class ShownFormatter(logging.Formatter):
    """Formats ``vkcap: %(message)s`` with each textual argument (:data:`TEXTUAL`) through
    :func:`~vkcore.safe_text.shown` (a uid, a path, a line built from trace text: newlines and controls
    escaped, so an argument never forges or hides a line), then the whole record through
    :func:`~vkcore.safe_text.shown_lines` (what vkcap itself put into a message of several lines, and
    a traceback under ``--log-level debug``, keep their newlines; nothing else raw remains)."""

    def __init__(self) -> None:
        super().__init__("vkcap: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        if isinstance(record.args, tuple) and record.args:
            record = logging.makeLogRecord(record.__dict__)  # the record is shared with other handlers
            record.args = tuple(shown(a) if isinstance(a, TEXTUAL) else a for a in record.args)
        return shown_lines(super().format(record))
