"""The argument parser of every vkcap command line (the whole CLI's and a suite replay's flags)."""
from __future__ import annotations

import argparse
from typing import Any

from vkcore.errors import UsageError


class FlagParser(argparse.ArgumentParser):
    """argparse that reports usage errors as a :class:`UsageError` (one line, exit 2) and takes flags
    only as spelled in full: an abbreviation a script relies on would change meaning, or stop working,
    when a flag sharing its prefix is added."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see '{self.prog} --help')")
