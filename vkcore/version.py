"""vkcap's version: what the installed package's metadata says (pyproject.toml's ``version``).

A leaf: every layer may ask it (a trace's header, an extracted scenario, ``vkcap --version``) without
importing the CLI package above it. The metadata is read once per process, on the first call:
``importlib.metadata`` takes about 25 ms to import, which only a process that writes the version pays.
"""
from __future__ import annotations

from functools import cache

#: the version given when vkcap is not installed (its sources run from a bare checkout)
UNKNOWN = "unknown"


@cache
def vkcap_version() -> str:
    """vkcap's version from its package metadata, or :data:`UNKNOWN` when the package is not installed."""
    # lazy: vkcap --help imports this module, not importlib.metadata
    from importlib.metadata import PackageNotFoundError, version  # on first use only: see the module's doc

    try:
        return version("vkcap")
    except PackageNotFoundError:
        return UNKNOWN


def vkcap_version_if_read() -> str:
    """vkcap's version when this process has read it already, else "": for a cache key that must cost
    nothing to compute."""
    return vkcap_version() if vkcap_version.cache_info().currsize else ""
