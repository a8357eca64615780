"""vkcap: the command line. Parses arguments and wires vkcore, capture and replay together."""
from __future__ import annotations

from vkcore.version import vkcap_version


def __getattr__(name: str) -> str:
    """``vkcap.__version__``, read from the package metadata only when asked (see :mod:`vkcore.version`)."""
    if name == "__version__":
        return vkcap_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
