"""Where vkcap keeps its caches (compiled shaders, layer manifests, validated scenarios, pipeline caches)."""
from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$VKCAP_CACHE_DIR``, else ``$XDG_CACHE_HOME/vkcap``, else ``~/.cache/vkcap``. Not created here."""
    explicit = os.environ.get("VKCAP_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "vkcap"
