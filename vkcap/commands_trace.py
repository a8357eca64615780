"""Trace commands (record, info, export, replay, diff, bisect): registered here as they land."""
from __future__ import annotations

import argparse
from typing import Callable

AddFlags = Callable[[argparse.ArgumentParser], None]


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]", add_common: AddFlags, add_run_flags: AddFlags, add_device: AddFlags) -> None:
    """Add the trace subcommands to the ``vkcap`` parser."""
