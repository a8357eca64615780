"""The interface every device resource (buffer, image, tensor) offers the session.

The session creates resources in two phases so that a ``memory_group`` can alias buffers, images and
tensors on one allocation: ``create`` makes the Vulkan object and reports its memory requirements,
then the session allocates (one allocation per group, sized for the largest member at its offset)
and calls ``bind``. Everything else the session, the executor, the recorder and replay need is here,
generic over the kind:

- ``descriptor`` writes the resource into a descriptor set for one binding;
- ``record_snapshot`` records copies of the whole content (every mip level of an image) into a
  host-visible staging buffer at an offset, in the resource's *snapshot layout*: tightly packed,
  levels in order, ``snapshot_size`` bytes; ``record_restore`` copies such bytes back;
- ``load_initial`` fills the resource from its ``src`` (or zeros) through a one-time submission;
- ``write_dst`` writes the content to its ``dst`` file in the reference runner's format;
- ``meta`` describes a snapshot for traces (kind, format, dims, mips, dtype).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

@dataclass(frozen=True)
class MemoryRequirements:
    size: int
    alignment: int
    memoryTypeBits: int  # noqa: N815 - the Vulkan name, so memory.allocate accepts it


@dataclass
class DescriptorWrite:
    """One ``VkWriteDescriptorSet`` and the objects it points to (kept alive until the update)."""

    write: Any
    keepalive: list[Any] = field(default_factory=list)


class OneTimeSubmit(Protocol):
    """Runs ``record(cb)`` in a command buffer, submits it and waits (provided by the session)."""

    def __call__(self, record: Callable[[Any], None]) -> None: ...


class DeviceResource(Protocol):
    @property
    def uid(self) -> str: ...

    kind: str  # "buffer", "image" or "tensor"

    @property
    def requirements(self) -> MemoryRequirements: ...

    @property
    def host_access(self) -> bool:
        """Whether the resource wants host-visible memory (mapped buffers, linear tensors)."""

    def bind(self, allocation: Any, offset: int) -> None: ...

    @property
    def snapshot_size(self) -> int: ...

    @property
    def snapshot_alignment(self) -> int:
        """Offsets given to ``record_snapshot`` / ``record_restore`` must be multiples of this."""

    def meta(self) -> dict[str, Any]: ...

    def descriptor_type(self, descriptor_type_override: str) -> int: ...

    def check_binding(self, binding: Any) -> None:
        """Refuse, at the binding's JSON path, a :class:`~vkcore.shaders.bindings.LayoutBinding` this
        resource cannot serve on this device (before any pipeline or descriptor exists)."""

    def descriptor(self, dst_set: Any, binding: int, lod: int | None, descriptor_type: int) -> DescriptorWrite: ...

    def record_snapshot(self, cb: Any, staging: Any, offset: int) -> None:
        """Copy the whole content into buffer ``staging`` at ``offset`` (snapshot layout), with the
        barriers needed before (prior writes visible) and after (ready for host reads, and for later
        commands to use the resource as before)."""

    def record_restore(self, cb: Any, staging: Any, offset: int) -> None:
        """The inverse of ``record_snapshot``: copy snapshot-layout bytes from ``staging`` into the resource."""

    def load_initial(self, src: Path | None, submit: OneTimeSubmit) -> None: ...

    def write_dst(self, path: Path, submit: OneTimeSubmit) -> None: ...

    def destroy(self) -> None: ...
