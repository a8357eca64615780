"""``mark_boundary``: ends a frame; the resources it names are captured there (see :mod:`vkcore.exec.plan`)."""
from __future__ import annotations

from ..scenario.model import MarkBoundary
from .base import NoDeviceWork


class BoundaryKind(NoDeviceWork):
    command_type: type = MarkBoundary
    boundary = True
