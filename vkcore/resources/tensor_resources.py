"""Scenario tensors as device resources: the :class:`~vkcore.resources.base.DeviceResource` of kind "tensor".

A :class:`TensorResource` is one ``VkTensorARM`` (VK_ARM_tensors, through :mod:`vkcore.resources.tensors`) made
from a scenario :class:`~vkcore.scenario.model.Tensor`. Guarantees:

- Snapshots are the tensor's elements *packed* (row-major, outermost dimension first), whatever the
  tensor's tiling or strides: ``snapshot_size`` = element size x prod(dims) bytes, byte-identical to
  the payload of the ``.npy`` file the reference runner writes for the tensor.
- VK_ARM_tensors has no copy between tensors and buffers ("memory aliasing is the sole mechanism
  available to exchange data with other resource types"). A LINEAR packed tensor is copied through a
  ``VkBuffer`` bound to the same memory range; a strided LINEAR or an OPTIMAL tensor is first copied
  (``vkCmdCopyTensorARM``) into a private packed LINEAR tensor that has such an aliasing buffer. Both
  helpers are made on first use and destroyed with the resource.
- Every recorded copy is fenced by barriers: a global memory barrier (which covers tensor memory like
  any other; VK_ARM_tensors does not require a tensor barrier for same-queue synchronization) and,
  in the same ``VkDependencyInfo``, a ``VkTensorMemoryBarrierARM`` on each tensor involved.
- ``.npy`` inputs are checked before any copy: C order, the format's dtype (``|b1`` or ``|u1`` for
  ``VK_FORMAT_R8_BOOL_ARM``), the exact shape ``dims``; a :class:`~vkcore.errors.ScenarioError`
  naming the file says what differs. Bytes are copied as they are (a ``uint8`` file's 2 stays 2 in a
  bool tensor, as with the reference).
- Outputs are written with :func:`vkcore.scenario.npyio.write_typed`: dtype from the format, shape from dims,
  the reference's header (measured byte for byte against ``scenario-runner`` 0.11.0).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import vulkan as vk

from ..device import memory
from ..scenario import npyio
from . import tensors
from ..device.arm_ffi import DESCRIPTOR_TYPE_TENSOR_ARM
from .buffers import fill_from_npy
from ..device.context import VulkanContext
from ..errors import DeviceError, ScenarioError
from .formats import PAYLOAD_FORMATS, format_info, tensor_dtype
from .base import DescriptorWrite, MemoryRequirements, OneTimeSubmit
from .buffers import free_staging, staging_buffer
from ..scenario.model import Tensor as TensorSpec
from .tensors import DeviceTensor, TensorApi, TensorBarrier

__all__ = ["TensorResource", "TILING", "TENSOR_USAGE", "ALIAS_BUFFER_USAGE", "accepted_dtypes"]

TILING: dict[str, int] = {"LINEAR": tensors.LINEAR, "OPTIMAL": tensors.OPTIMAL}
TENSOR_USAGE = tensors.DEFAULT_USAGE  # SHADER | TRANSFER_SRC | TRANSFER_DST
ALIAS_BUFFER_USAGE = vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
AUTO_DESCRIPTOR_TYPES = frozenset({"", "VK_DESCRIPTOR_TYPE_AUTO", "VK_DESCRIPTOR_TYPE_TENSOR_ARM"})

_ALL = vk.VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT
_COPY = vk.VK_PIPELINE_STAGE_2_TRANSFER_BIT
_HOST = vk.VK_PIPELINE_STAGE_2_HOST_BIT
_MEM_R = vk.VK_ACCESS_2_MEMORY_READ_BIT
_MEM_W = vk.VK_ACCESS_2_MEMORY_WRITE_BIT
_XFER_R = vk.VK_ACCESS_2_TRANSFER_READ_BIT
_XFER_W = vk.VK_ACCESS_2_TRANSFER_WRITE_BIT
_HOST_R = vk.VK_ACCESS_2_HOST_READ_BIT

# (src stage, src access, dst stage, dst access) around the copies. vkCmdCopyTensorARM is a transfer
# command, but an emulation layer may implement it with a dispatch: copies of tensors wait on and
# are waited on by ALL_COMMANDS.
_PRIOR_WRITES_TO_COPY = (_ALL, _MEM_W, _ALL | _COPY, _MEM_R | _MEM_W | _XFER_R | _XFER_W)
_COPY_TO_COPY = (_ALL | _COPY, _MEM_W | _XFER_W, _ALL | _COPY, _MEM_R | _MEM_W | _XFER_R | _XFER_W)
_COPY_TO_LATER = (_ALL | _COPY, _MEM_W | _XFER_W, _ALL | _HOST, _MEM_R | _MEM_W | _HOST_R)


def accepted_dtypes(format_name: str) -> tuple[str, ...]:
    """The ``.npy`` dtype strings a tensor of ``format_name`` loads from: its own (``|b1`` for bool,
    which also accepts ``|u1``; a payload format, bfloat16 or float8, any dtype of its element size)."""
    own = tensor_dtype(format_name)
    if format_name in PAYLOAD_FORMATS:
        size = format_info(format_name).block_bytes
        return tuple(dict.fromkeys([own, *(np.dtype(f"{k}{size}").str for k in "uif" if size > 1 or k != "f"),
                                    f"|V{size}"]))
    return (own, "|u1") if own == "|b1" else (own,)


def _normalized_descr(descr: str) -> str:
    """``descr`` with native/no byte order spelled as numpy's ``dtype.str`` does (``=f4`` -> ``<f4``)."""
    try:
        return np.dtype(descr).str
    except TypeError:
        return descr


def _raw_dtype(size: int) -> np.dtype:
    """An unsigned integer dtype of ``size`` bytes: moves elements as raw bytes (NaN payloads, bool 2)."""
    return np.dtype(f"<u{size}") if size > 1 else np.dtype("u1")


class TensorResource:
    """A scenario tensor on the device. Create with :meth:`create`, then ``bind`` (the session allocates).

    ``tensor`` is the :class:`~vkcore.resources.tensors.DeviceTensor`; ``spec`` the scenario's description.
    """

    kind = "tensor"

    def __init__(self, ctx: VulkanContext, api: TensorApi, spec: TensorSpec, tensor: DeviceTensor) -> None:
        self.ctx = ctx
        self.api = api
        self.spec = spec
        self.uid = spec.uid
        self.tensor = tensor
        self.format_name = format_info(spec.format).name
        self.descr = tensor_dtype(self.format_name)
        self.element_size = tensor.description.element.size
        self.dims = tensor.description.dims
        # made on first snapshot/restore: (buffer over our own memory) or (private tensor, its buffer, memory)
        self._alias_buffer: Any = None
        self._private: DeviceTensor | None = None
        self._private_buffer: Any = None
        self._private_memory: memory.Allocation | None = None
        self._path: str | None = None  # "direct" or "copy", decided at first use

    # -- creation -----------------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        ctx: VulkanContext,
        api: TensorApi,
        spec: TensorSpec,
        strides: tuple[int, ...] | None = None,
        *,
        extra_usage: int = 0,
    ) -> "TensorResource":
        """Create the ``VkTensorARM`` for ``spec`` (format, dims, tiling; LINEAR when unset, as the reference).

        ``strides`` (bytes, outermost first) lay a LINEAR tensor out like the image it aliases; ``None``
        means packed. Usage is SHADER | TRANSFER_SRC | TRANSFER_DST, plus ``extra_usage`` (IMAGE_ALIASING
        for a memory group shared with an image,
        DATA_GRAPH for graph inputs and outputs). Raises :class:`ScenarioError` for a format that is not a
        tensor format or an unknown tiling, :class:`DeviceError` for what the device cannot create.
        """
        try:
            info = format_info(spec.format)
            tensor_dtype(info.name)
        except KeyError as exc:
            raise ScenarioError(f"tensor '{spec.uid}': {exc.args[0]}", place=f"{spec.place}.format") from None
        tiling_name = spec.tiling or "LINEAR"
        if tiling_name not in TILING:
            raise ScenarioError(f"tensor '{spec.uid}': tiling {tiling_name!r} is neither LINEAR nor OPTIMAL",
                                place=f"{spec.place}.tiling")
        usage = TENSOR_USAGE | int(extra_usage)
        try:
            tensor = DeviceTensor.create(api, info.vk_value, spec.dims, TILING[tiling_name], usage, strides)
        except DeviceError as exc:
            raise DeviceError(f"tensor '{spec.uid}': {exc.message}", place=spec.place) from None
        return cls(ctx, api, spec, tensor)

    # -- DeviceResource: memory -------------------------------------------------------------------------

    @property
    def requirements(self) -> MemoryRequirements:
        r = self.tensor.requirements
        return MemoryRequirements(r.size, r.alignment, r.memoryTypeBits)

    @property
    def host_access(self) -> bool:
        """LINEAR tensors want host-visible, mapped memory (inputs and outputs go straight through it)."""
        return self.tensor.description.tiling == tensors.LINEAR

    def bind(self, allocation: memory.Allocation, offset: int) -> None:
        try:
            self.tensor.bind(allocation, offset)
        except DeviceError as exc:
            raise DeviceError(f"tensor '{self.uid}': {exc.message}", place=self.spec.place) from None

    @property
    def packed(self) -> bool:
        """LINEAR with packed strides: the memory holds exactly the snapshot bytes."""
        d = self.tensor.description
        return d.tiling == tensors.LINEAR and d.effective_strides == tensors.packed_strides(d.element.size, d.dims)

    @property
    def mapped(self) -> bool:
        """Whether the host can read and write the elements in place (LINEAR, bound to mapped memory)."""
        a = self.tensor.allocation
        return self.host_access and a is not None and a.view is not None

    # -- DeviceResource: descriptors --------------------------------------------------------------------

    def descriptor_type(self, descriptor_type_override: str) -> int:
        if descriptor_type_override not in AUTO_DESCRIPTOR_TYPES:
            raise ScenarioError(f"tensor '{self.uid}' cannot be bound as {descriptor_type_override}; "
                                "tensors bind as VK_DESCRIPTOR_TYPE_TENSOR_ARM (leave descriptor_type unset)")
        return DESCRIPTOR_TYPE_TENSOR_ARM

    def check_binding(self, binding: Any) -> None:
        """Nothing of a tensor binding depends on the device beyond what creation checked."""

    def descriptor(self, dst_set: Any, binding: int, lod: int | None, descriptor_type: int) -> DescriptorWrite:
        """A ``VkWriteDescriptorSet`` of the tensor's view (``lod`` has no meaning for tensors)."""
        if descriptor_type != DESCRIPTOR_TYPE_TENSOR_ARM:
            raise DeviceError(f"tensor '{self.uid}' can only be written as a TENSOR_ARM descriptor, not {descriptor_type}")
        chained = tensors.tensor_descriptor_write(dst_set, binding, [self.tensor])
        return DescriptorWrite(chained.value, [chained, *chained.keep, self.tensor.view])

    # -- barriers ----------------------------------------------------------------------------------------

    def barrier(self, src_stage: int, src_access: int, dst_stage: int, dst_access: int) -> TensorBarrier:
        """A :class:`~vkcore.resources.tensors.TensorBarrier` on this tensor, to gather with others in one
        ``tensors.tensor_dependency([...])`` (a ``VkDependencyInfo`` may chain one tensor dependency info)."""
        return TensorBarrier(self.tensor, int(src_stage), int(src_access), int(dst_stage), int(dst_access))

    def tensor_barrier(self, src_stage: int, src_access: int, dst_stage: int, dst_access: int) -> tensors.Chained:
        """A scenario ``tensor_barrier`` on this tensor, as :class:`vkcore.device.sync.BarrierBatch` takes it:
        ``batch.extra_next = c.value`` (a ``VkTensorDependencyInfoARM *`` as ``void *``) and
        ``batch.keepalive += [c, *c.keep]``. Stages and accesses are synchronization2 masks (``sync.STAGE``,
        ``sync.ACCESS``). Several tensors in one batch: :meth:`barrier` each, then ``tensors.tensor_dependency``."""
        return tensors.tensor_dependency([self.barrier(src_stage, src_access, dst_stage, dst_access)])

    def _record_barrier(self, cb: Any, masks: tuple[int, int, int, int], tensor_list: Sequence[DeviceTensor]) -> None:
        src_stage, src_access, dst_stage, dst_access = masks
        mem = vk.VkMemoryBarrier2(srcStageMask=src_stage, srcAccessMask=src_access,
                                  dstStageMask=dst_stage, dstAccessMask=dst_access)
        tbs = [TensorBarrier(t, src_stage, src_access, dst_stage, dst_access) for t in tensor_list]
        info = tensors.dependency_info(tbs, memory_barriers=[mem])
        vk.vkCmdPipelineBarrier2(cb, info.value)
        del info

    # -- snapshots ---------------------------------------------------------------------------------------

    @property
    def snapshot_size(self) -> int:
        return self.element_size * self.tensor.description.element_count

    @property
    def snapshot_alignment(self) -> int:
        """``record_snapshot`` / ``record_restore`` offsets must be multiples of this: any offset will do."""
        return 1

    def _bind_alias_buffer(self, allocation: memory.Allocation, offset: int) -> Any:
        """A transfer buffer over ``snapshot_size`` bytes of ``allocation`` at ``offset``, or ``None`` when
        the device does not allow a buffer there (memory type, alignment)."""
        handle = vk.vkCreateBuffer(self.ctx.device, vk.VkBufferCreateInfo(
            size=self.snapshot_size, usage=ALIAS_BUFFER_USAGE, sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE), None)
        req = vk.vkGetBufferMemoryRequirements(self.ctx.device, handle)
        if (not req.memoryTypeBits & (1 << allocation.type_index) or (req.alignment and offset % req.alignment)
                or offset + req.size > allocation.size):
            vk.vkDestroyBuffer(self.ctx.device, handle, None)
            return None
        vk.vkBindBufferMemory(self.ctx.device, handle, allocation.memory, offset)
        return handle

    def _prepare_copies(self) -> str:
        """Make (once) what snapshots and restores copy through; return the path: "direct" or "copy"."""
        if self._path is not None:
            return self._path
        if self.tensor.allocation is None:
            raise DeviceError(f"tensor '{self.uid}': bind memory before recording copies of it")
        if self.packed:
            self._alias_buffer = self._bind_alias_buffer(self.tensor.allocation, self.tensor.offset)
            if self._alias_buffer is not None:
                self._path = "direct"
                return self._path
        d = self.tensor.description
        private = DeviceTensor.create(self.api, d.format, d.dims, tensors.LINEAR, TENSOR_USAGE)
        try:
            probe = vk.vkCreateBuffer(self.ctx.device, vk.VkBufferCreateInfo(
                size=self.snapshot_size, usage=ALIAS_BUFFER_USAGE, sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE), None)
            breq = vk.vkGetBufferMemoryRequirements(self.ctx.device, probe)
            vk.vkDestroyBuffer(self.ctx.device, probe, None)
            treq = private.requirements
            bits = treq.memoryTypeBits & breq.memoryTypeBits
            if not bits:
                raise DeviceError(f"tensor '{self.uid}': no memory type holds both a tensor and a buffer "
                                  f"(tensor bits {treq.memoryTypeBits:#x}, buffer bits {breq.memoryTypeBits:#x}); "
                                  "its content cannot be copied to or from buffers")
            size = max(treq.size, breq.size, self.snapshot_size)
            req = MemoryRequirements(size, max(treq.alignment, breq.alignment), bits)
            self._private_memory = memory.allocate(self.ctx, req, size, host_access=False,
                                                   what=f"the copy tensor of '{self.uid}'")
            private.bind(self._private_memory, 0)
            self._private = private
            self._private_buffer = self._bind_alias_buffer(self._private_memory, 0)
            if self._private_buffer is None:
                raise DeviceError(f"tensor '{self.uid}': cannot bind a buffer over its copy tensor's memory")
        except BaseException:
            private.destroy()
            if self._private_memory is not None:
                memory.free(self.ctx, self._private_memory)
            self._private = self._private_memory = None
            raise
        self._path = "copy"
        return self._path

    def record_snapshot(self, cb: Any, staging: Any, offset: int) -> None:
        """Copy the elements, packed, into buffer ``staging`` at ``offset`` (``snapshot_size`` bytes)."""
        path = self._prepare_copies()
        region = [vk.VkBufferCopy(srcOffset=0, dstOffset=offset, size=self.snapshot_size)]
        if path == "direct":
            self._record_barrier(cb, _PRIOR_WRITES_TO_COPY, [self.tensor])
            vk.vkCmdCopyBuffer(cb, self._alias_buffer, staging, 1, region)
            self._record_barrier(cb, _COPY_TO_LATER, [self.tensor])
            return
        assert self._private is not None
        self._record_barrier(cb, _PRIOR_WRITES_TO_COPY, [self.tensor, self._private])
        tensors.cmd_copy_tensor(self.api, cb, self.tensor, self._private)
        self._record_barrier(cb, _COPY_TO_COPY, [self.tensor, self._private])
        vk.vkCmdCopyBuffer(cb, self._private_buffer, staging, 1, region)
        self._record_barrier(cb, _COPY_TO_LATER, [self.tensor, self._private])

    def record_restore(self, cb: Any, staging: Any, offset: int) -> None:
        """Copy ``snapshot_size`` packed bytes from buffer ``staging`` at ``offset`` into the tensor."""
        path = self._prepare_copies()
        region = [vk.VkBufferCopy(srcOffset=offset, dstOffset=0, size=self.snapshot_size)]
        if path == "direct":
            self._record_barrier(cb, _PRIOR_WRITES_TO_COPY, [self.tensor])
            vk.vkCmdCopyBuffer(cb, staging, self._alias_buffer, 1, region)
            self._record_barrier(cb, _COPY_TO_LATER, [self.tensor])
            return
        assert self._private is not None
        self._record_barrier(cb, _PRIOR_WRITES_TO_COPY, [self.tensor, self._private])
        vk.vkCmdCopyBuffer(cb, staging, self._private_buffer, 1, region)
        self._record_barrier(cb, _COPY_TO_COPY, [self.tensor, self._private])
        tensors.cmd_copy_tensor(self.api, cb, self._private, self.tensor)
        self._record_barrier(cb, _COPY_TO_LATER, [self.tensor, self._private])

    # -- files -------------------------------------------------------------------------------------------

    def check_npy(self, src: Path) -> npyio.NpyHeader:
        """The header of ``src`` if it can initialize this tensor; :class:`ScenarioError` naming the file otherwise."""
        place = f"{self.spec.place}.src"
        try:
            header = npyio.read_header(src)
        except FileNotFoundError:
            raise ScenarioError(f"tensor '{self.uid}': input file {src} does not exist", place=place) from None
        except (OSError, npyio.NpyFormatError) as exc:
            raise ScenarioError(f"tensor '{self.uid}': cannot read {src}: {exc}", place=place) from None
        problems: list[str] = []
        accepted = accepted_dtypes(self.format_name)
        descr = _normalized_descr(header.descr)
        if descr not in accepted:
            problems.append(f"dtype {header.descr} is not {' or '.join(accepted)} ({self.format_name})")
        if tuple(header.shape) != tuple(self.dims):
            problems.append(f"shape {list(header.shape)} is not the tensor's dims {list(self.dims)}")
        if header.fortran_order:
            problems.append("the array is in Fortran order; only C order is read (as by the reference runner)")
        if problems:
            raise ScenarioError(f"tensor '{self.uid}': {src}: " + "; ".join(problems), place=place)
        return header

    def _through_staging(self, fill: Callable[[memoryview], object] | None, record: str, submit: OneTimeSubmit) -> bytes | None:
        """Fill a staging buffer and restore from it (``record="restore"``), or snapshot into one and
        return its bytes (``record="snapshot"``)."""
        handle, alloc = staging_buffer(self.ctx, self.snapshot_size)
        assert alloc.view is not None
        view = alloc.view[: self.snapshot_size]
        try:
            if record == "restore":
                if fill is None:
                    alloc.zero(0, self.snapshot_size)
                else:
                    fill(view)
                submit(lambda cb: self.record_restore(cb, handle, 0))
                return None
            submit(lambda cb: self.record_snapshot(cb, handle, 0))
            return bytes(view)
        finally:
            view.release()
            free_staging(self.ctx, handle, alloc)

    def _raw_array(self) -> np.ndarray:
        """The mapped elements as raw unsigned integers (shape dims, the tensor's strides)."""
        d = self.tensor.description
        return np.ndarray(d.dims, dtype=_raw_dtype(self.element_size), buffer=self.tensor.host_view(),
                          strides=d.effective_strides)

    def load_initial(self, src: Path | None, submit: OneTimeSubmit) -> None:
        """Fill the tensor from ``.npy`` ``src`` (checked by :meth:`check_npy`), or with zeros.

        Without ``src``, a tensor in a ``memory_group`` is left as it is,
        as by the reference runner: its memory holds what the other members load. LINEAR tensors in mapped
        memory are filled in place (packed: read from the file straight into the mapping); others through
        a staging buffer and :meth:`record_restore`.
        """
        header = self.check_npy(Path(src)) if src is not None else None
        if header is None and self.spec.memory_group:
            return
        if self.mapped:
            if header is None:
                a = self.tensor.allocation
                assert a is not None
                a.zero(self.tensor.offset, self.tensor.description.span)
            elif self.packed:
                fill_from_npy(self.tensor.host_view(), Path(src))  # type: ignore[arg-type]
            else:
                assert src is not None
                data = np.fromfile(src, dtype=_raw_dtype(self.element_size), count=header.count,
                                   offset=header.data_offset).reshape(self.dims)
                self._raw_array()[...] = data
            return
        fill = (lambda view: fill_from_npy(view, Path(src))) if header is not None else None  # type: ignore[arg-type]
        self._through_staging(fill, "restore", submit)

    def content(self, submit: OneTimeSubmit) -> bytes:
        """The elements, packed (``snapshot_size`` bytes), read after the device finished writing them."""
        if self.mapped:
            if self.packed:
                return bytes(self.tensor.host_view())
            return np.ascontiguousarray(self._raw_array()).tobytes()
        data = self._through_staging(None, "snapshot", submit)
        assert data is not None
        return data

    def write_dst(self, path: Path, submit: OneTimeSubmit) -> None:
        """Write the tensor to ``path`` as the reference does: ``.npy`` of the format's dtype, shape dims."""
        if self.mapped and self.packed:
            npyio.write_typed(path, self.descr, self.dims, self.tensor.host_view())
            return
        npyio.write_typed(path, self.descr, self.dims, self.content(submit))

    # -- description and teardown -----------------------------------------------------------------------

    def meta(self) -> dict[str, Any]:
        return {
            "kind": "tensor",
            "format": self.format_name,
            "dims": list(self.dims),
            "dtype": self.descr,
            "size": self.snapshot_size,
            "tiling": "LINEAR" if self.tensor.description.tiling == tensors.LINEAR else "OPTIMAL",
        }

    def destroy(self) -> None:
        """Destroy the tensor, its view and the copy helpers (not the session's allocation). Idempotent."""
        d = self.ctx.device
        if self._alias_buffer is not None:
            vk.vkDestroyBuffer(d, self._alias_buffer, None)
            self._alias_buffer = None
        if self._private_buffer is not None:
            vk.vkDestroyBuffer(d, self._private_buffer, None)
            self._private_buffer = None
        if self._private is not None:
            self._private.destroy()
            self._private = None
        if self._private_memory is not None:
            memory.free(self.ctx, self._private_memory)
            self._private_memory = None
        self._path = None
        self.tensor.destroy()
