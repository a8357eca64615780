"""``mark_boundary``: ends a frame; the resources it names are captured there (see :mod:`vkcore.plan`)."""
from __future__ import annotations

from ..scenario import MarkBoundary
from .base import NoDeviceWork


class BoundaryKind(NoDeviceWork):
    command_type: type = MarkBoundary
    boundary = True
