"""The typed, immutable scenario model.

:func:`vkcore.scenario.load.load_scenario` reads a scenario JSON file, validates it and returns a
:class:`Scenario`; :func:`scenario_from_document` builds one from a validated document. Every field of the
specification is represented, with the specification's defaults filled in, so later stages never look
at raw JSON again. Paths stay as written; :meth:`Scenario.src_path` / :meth:`Scenario.dst_path` resolve
them (``src`` against the scenario's folder, ``dst`` against the output folder), like the reference runner.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

from .confine import confined_path



@dataclass(frozen=True)
class SpecializationConstant:
    id: int
    value: int | float


@dataclass(frozen=True)
class SpecializationConstantMap:
    specialization_constants: tuple[SpecializationConstant, ...]
    shader_target: str


@dataclass(frozen=True)
class ShaderSubstitution:
    shader_ref: str
    target: str


@dataclass(frozen=True)
class SubresourceRange:
    base_mip_level: int = 0
    level_count: int = 1
    base_array_layer: int = 0
    layer_count: int = 1


# Where a resource or command names other resources, as data: ((path inside its JSON body, "*" = every
# list item), the resource kinds allowed there), checked by vkcore.scenario.validate. DATA stands for every
# kind that holds data (buffer, image, tensor: vkcore.resources.kinds says which).
RefRules = tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]
DATA = "<data>"


RESOURCE_KINDS: dict[str, type[Resource]] = {}
"""Every resource kind's model by its JSON key, in the order they are defined: a class with a ``KIND``
enters it as it is defined (``Resource.__init_subclass__``)."""
COMMAND_KINDS: dict[str, type[Command]] = {}
"""Every command kind's model by its JSON key, as :data:`RESOURCE_KINDS`."""


@dataclass(frozen=True)
class Resource:
    """Common part of every resource: its uid and its position in ``resources``. A subclass with a
    ``KIND`` is a resource kind of the format (:data:`RESOURCE_KINDS`)."""

    KIND: ClassVar[str] = ""
    REFS: ClassVar[RefRules] = ()
    HOLDS_DATA: ClassVar[bool] = False  # device memory: bound by commands, captured, restored by a replay
    SRC: ClassVar[str | None] = None  # what its src names: "npy" (a .npy file), "file" (any file), None (no src)
    CHECKS: ClassVar[str] = ""  # the module of vkcore.scenario.checks holding its checks ("": none of its own)
    # What a command's binding can bind it as (descriptor kinds as vkcore.shaders.spirv names them), first the
    # one it gets when nothing else decides; () for a kind no descriptor can bind.
    DESCRIPTORS: ClassVar[tuple[str, ...]] = ()
    uid: str
    index: int

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "KIND" in vars(cls) and cls.KIND:  # a kind names itself; a subclass of one is not another kind
            RESOURCE_KINDS[cls.KIND] = cls

    @property
    def place(self) -> str:
        """The JSON path of this resource, e.g. ``resources[3].buffer``."""
        return f"resources[{self.index}].{self.KIND}"


@dataclass(frozen=True)
class Buffer(Resource):
    KIND: ClassVar[str] = "buffer"
    CHECKS: ClassVar[str] = "buffer"
    DESCRIPTORS: ClassVar[tuple[str, ...]] = ("storage_buffer", "uniform_buffer")
    HOLDS_DATA: ClassVar[bool] = True
    SRC: ClassVar[str | None] = "npy"
    size: int = 0
    shader_access: str = "readwrite"
    src: str = ""
    dst: str = ""
    memory_group: str = ""
    memory_offset: int = 0  # the reference runner's memory_group.offset, in bytes


@dataclass(frozen=True)
class Image(Resource):
    KIND: ClassVar[str] = "image"
    CHECKS: ClassVar[str] = "image"
    DESCRIPTORS: ClassVar[tuple[str, ...]] = ("combined_image_sampler", "storage_image", "sampled_image", "sampler")
    HOLDS_DATA: ClassVar[bool] = True
    SRC: ClassVar[str | None] = "file"
    format: str = ""
    dims: tuple[int, ...] = ()
    shader_access: str = "readonly"
    mips: int = 1
    src: str = ""
    dst: str = ""
    min_filter: str = "NEAREST"
    mag_filter: str = "NEAREST"
    mip_filter: str = "NEAREST"
    border_address_mode: str = "CLAMP_EDGE"
    border_color: str = "FLOAT_TRANSPARENT_BLACK"
    custom_border_color: tuple[int | float, ...] = ()
    memory_group: str = ""
    memory_offset: int = 0
    tiling: str = ""  # absent: LINEAR when a tensor aliases the image (as the reference runner), else OPTIMAL
    color_attachment: bool = False  # usable as a dispatch_fragment's color attachment


@dataclass(frozen=True)
class Tensor(Resource):
    KIND: ClassVar[str] = "tensor"
    CHECKS: ClassVar[str] = "tensor"
    DESCRIPTORS: ClassVar[tuple[str, ...]] = ("tensor",)
    HOLDS_DATA: ClassVar[bool] = True
    SRC: ClassVar[str | None] = "npy"
    dims: tuple[int, ...] = ()
    format: str = ""
    shader_access: str = "readwrite"
    src: str = ""
    dst: str = ""
    memory_group: str = ""
    memory_offset: int = 0
    tiling: str = "LINEAR"


@dataclass(frozen=True)
class RawData(Resource):
    KIND: ClassVar[str] = "raw_data"
    SRC: ClassVar[str | None] = "npy"
    src: str = ""


@dataclass(frozen=True)
class Shader(Resource):
    KIND: ClassVar[str] = "shader"
    CHECKS: ClassVar[str] = "shader"
    SRC: ClassVar[str | None] = "file"
    src: str = ""
    entry: str = "main"
    type: str = "SPIR-V"
    stage: str = "compute"  # compute, vertex or fragment
    build_options: str = ""
    include_dirs: tuple[str, ...] = ()
    push_constants_size: int = 0
    specialization_constants: tuple[SpecializationConstant, ...] = ()


@dataclass(frozen=True)
class Graph(Resource):
    KIND: ClassVar[str] = "graph"
    CHECKS: ClassVar[str] = "graph"
    SRC: ClassVar[str | None] = "file"
    REFS: ClassVar[RefRules] = ((("shader_substitutions", "*", "shader_ref"), ("shader",)),)
    src: str = ""
    specialization_constants_map: tuple[SpecializationConstantMap, ...] = ()
    shader_substitutions: tuple[ShaderSubstitution, ...] = ()
    push_constants_size: int = 0


@dataclass(frozen=True)
class GraphConstant(Resource):
    """Constant tensor data for a ``dispatch_spirv_graph`` (a ``.npy`` ``src``)."""

    KIND: ClassVar[str] = "graph_constant"
    CHECKS: ClassVar[str] = "graph_constant"
    SRC: ClassVar[str | None] = "npy"
    dims: tuple[int, ...] = ()
    format: str = ""
    src: str = ""


GRAPH_ACCESS_NAMES = frozenset({"ACCESS_GRAPH_WRITE", "ACCESS_GRAPH_READ"})


@dataclass(frozen=True)
class Barrier(Resource):
    """Fields shared by the four barrier kinds."""

    src_access: str = ""
    dst_access: str = ""
    src_stage: tuple[str, ...] = ("ALL",)  # the reference runner's default when omitted
    dst_stage: tuple[str, ...] = ("ALL",)

    @property
    def syncs_graphs(self) -> bool:
        """Whether the barrier names graph stages or accesses (which need VK_ARM_data_graph enabled)."""
        return bool({self.src_access, self.dst_access} & GRAPH_ACCESS_NAMES) or "GRAPH" in (*self.src_stage, *self.dst_stage)


@dataclass(frozen=True)
class MemoryBarrier(Barrier):
    KIND: ClassVar[str] = "memory_barrier"


@dataclass(frozen=True)
class BufferBarrier(Barrier):
    KIND: ClassVar[str] = "buffer_barrier"
    CHECKS: ClassVar[str] = "buffer_barrier"
    REFS: ClassVar[RefRules] = ((("buffer_resource",), ("buffer",)),)
    buffer_resource: str = ""
    size: int = 0
    offset: int = 0


@dataclass(frozen=True)
class ImageBarrier(Barrier):
    KIND: ClassVar[str] = "image_barrier"
    CHECKS: ClassVar[str] = "image_barrier"
    REFS: ClassVar[RefRules] = ((("image_resource",), ("image",)),)
    image_resource: str = ""
    old_layout: str = "IMAGE_LAYOUT_GENERAL"
    new_layout: str = "IMAGE_LAYOUT_GENERAL"
    subresource_range: SubresourceRange = SubresourceRange()


@dataclass(frozen=True)
class TensorBarrier(Barrier):
    KIND: ClassVar[str] = "tensor_barrier"
    REFS: ClassVar[RefRules] = ((("tensor_resource",), ("tensor",)),)
    tensor_resource: str = ""


# How the reference runner binds an image no shader declares, by shader_access, and what a binding's
# descriptor_type can force (descriptor kinds as vkcore.shaders.spirv names them).
IMAGE_DEFAULT_BY_ACCESS = {"readonly": "combined_image_sampler", "readwrite": "combined_image_sampler",
                           "writeonly": "storage_image", "image_read": "storage_image"}
AUTO = "VK_DESCRIPTOR_TYPE_AUTO"
OVERRIDES = {AUTO: None, "VK_DESCRIPTOR_TYPE_STORAGE_IMAGE": "storage_image"}


@dataclass(frozen=True)
class Binding:
    set: int
    id: int
    resource_ref: str
    lod: int | None = None  # None: the whole image; a level binds that mip level's view
    descriptor_type: str = "VK_DESCRIPTOR_TYPE_AUTO"


@dataclass(frozen=True)
class PushConstantMap:
    push_data_ref: str
    shader_target: str


@dataclass(frozen=True)
class Command:
    KIND: ClassVar[str] = ""
    REFS: ClassVar[RefRules] = ()
    SHADER_STAGES: ClassVar[tuple[tuple[str, str], ...]] = ()  # (field naming a shader, the stage it must be)
    CHECKS: ClassVar[str] = ""  # the module of vkcore.scenario.checks holding its checks ("": none of its own)
    index: int
    spelled: str = field(default="", compare=False, kw_only=True)  # the JSON key, where it is an alias of KIND

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "KIND" in vars(cls) and cls.KIND:  # a kind names itself; a subclass of one is not another kind
            COMMAND_KINDS[cls.KIND] = cls

    @property
    def place(self) -> str:
        return f"commands[{self.index}].{self.spelled or self.KIND}"


@dataclass(frozen=True)
class DispatchCompute(Command):
    KIND: ClassVar[str] = "dispatch_compute"
    CHECKS: ClassVar[str] = "compute"
    REFS: ClassVar[RefRules] = (
        (("shader_ref",), ("shader",)),
        (("push_data_ref",), ("raw_data",)),
        (("bindings", "*", "resource_ref"), (DATA,)),
    )
    SHADER_STAGES: ClassVar[tuple[tuple[str, str], ...]] = (("shader_ref", "compute"),)
    shader_ref: str = ""
    push_data_ref: str = ""
    rangeND: tuple[int, int, int] = (1, 1, 1)
    bindings: tuple[Binding, ...] = ()
    implicit_barrier: bool = True


@dataclass(frozen=True)
class AttachmentRef:
    resource_ref: str
    lod: int = 0


@dataclass(frozen=True)
class DispatchFragment(Command):
    KIND: ClassVar[str] = "dispatch_fragment"
    CHECKS: ClassVar[str] = "fragment"
    REFS: ClassVar[RefRules] = (
        (("vertex_shader_ref",), ("shader",)),
        (("fragment_shader_ref",), ("shader",)),
        (("push_data_ref",), ("raw_data",)),
        (("bindings", "*", "resource_ref"), (DATA,)),
        (("color_attachment_refs", "*"), ("image",)),
        (("color_attachment_refs", "*", "resource_ref"), ("image",)),
    )
    SHADER_STAGES: ClassVar[tuple[tuple[str, str], ...]] = (("vertex_shader_ref", "vertex"), ("fragment_shader_ref", "fragment"))
    debug_name: str = ""
    vertex_shader_ref: str = ""
    fragment_shader_ref: str = ""
    bindings: tuple[Binding, ...] = ()
    color_attachment_refs: tuple[AttachmentRef, ...] = ()
    render_extent: tuple[int, ...] = ()
    push_data_ref: str = ""
    implicit_barrier: bool = True


@dataclass(frozen=True)
class DispatchGraph(Command):
    KIND: ClassVar[str] = "dispatch_graph"
    CHECKS: ClassVar[str] = "bindings"
    REFS: ClassVar[RefRules] = (
        (("graph_ref",), ("graph",)),
        (("push_constants", "*", "push_data_ref"), ("raw_data",)),
        (("shader_substitutions", "*", "shader_ref"), ("shader",)),
        (("bindings", "*", "resource_ref"), (DATA,)),
    )
    graph_ref: str = ""
    push_constants: tuple[PushConstantMap, ...] = ()
    bindings: tuple[Binding, ...] = ()
    implicit_barrier: bool = True
    shader_substitutions: tuple[ShaderSubstitution, ...] = ()  # where the reference runner reads them


@dataclass(frozen=True)
class DispatchSpirvGraph(Command):
    """A data graph from a SPIR-V module (``OpGraphARM``) given as a shader resource: no VGF."""

    KIND: ClassVar[str] = "dispatch_spirv_graph"
    CHECKS: ClassVar[str] = "spirv_graph"
    REFS: ClassVar[RefRules] = (
        (("graph_ref",), ("shader",)),
        (("bindings", "*", "resource_ref"), (DATA,)),
        (("graph_constants", "*"), ("graph_constant",)),
    )
    graph_ref: str = ""
    bindings: tuple[Binding, ...] = ()
    graph_constants: tuple[str, ...] = ()
    implicit_barrier: bool = True


@dataclass(frozen=True)
class OpticalFlowBinding(Binding):
    """An image of a ``dispatch_optical_flow``: a binding with its role (a key of ``bindings``)."""

    role: str = ""


# The roles of an optical-flow command's images, in the order they are bound and reported.
OPTICAL_FLOW_ROLES = ("search_image", "template_image", "hint_motion_vectors", "output_image", "output_cost")
OPTICAL_FLOW_OUTPUTS = ("output_image", "output_cost")


@dataclass(frozen=True)
class DispatchOpticalFlow(Command):
    """Motion vectors from a search and a template image through VK_ARM_data_graph_optical_flow."""

    KIND: ClassVar[str] = "dispatch_optical_flow"
    CHECKS: ClassVar[str] = "optical_flow"
    REFS: ClassVar[RefRules] = tuple((("bindings", role, "resource_ref"), ("image",)) for role in OPTICAL_FLOW_ROLES)
    width: int = 0
    height: int = 0
    grid_size: str = ""
    performance_level: str = "medium"
    execution_flags: tuple[str, ...] = ()
    mean_flow_l1_norm_hint: int = 0
    implicit_barrier: bool = True
    bindings: tuple[OpticalFlowBinding, ...] = ()  # in OPTICAL_FLOW_ROLES order, the optional ones when given

    def image(self, role: str) -> OpticalFlowBinding | None:
        return next((b for b in self.bindings if b.role == role), None)


@dataclass(frozen=True)
class DispatchBarrier(Command):
    KIND: ClassVar[str] = "dispatch_barrier"
    REFS: ClassVar[RefRules] = tuple(
        ((f"{k}_refs", "*"), (k,)) for k in ("image_barrier", "tensor_barrier", "memory_barrier", "buffer_barrier")
    )
    image_barrier_refs: tuple[str, ...] = ()
    tensor_barrier_refs: tuple[str, ...] = ()
    memory_barrier_refs: tuple[str, ...] = ()
    buffer_barrier_refs: tuple[str, ...] = ()


@dataclass(frozen=True)
class MarkBoundary(Command):
    KIND: ClassVar[str] = "mark_boundary"
    REFS: ClassVar[RefRules] = ((("resources", "*"), (DATA,)),)
    resources: tuple[str, ...] = ()
    frame_id: int | None = None  # None: the frame's position (ids given by hand are deprecated)


AnyResource = Resource  # any of RESOURCE_KINDS
AnyCommand = Command  # any of COMMAND_KINDS
# The reference runner's newer names: same fields, same command.
# Other spellings of a command kind -> its KIND. pipeline_barrier and dispatch_data_graph: the reference
# runner 0.11's names for dispatch_barrier and dispatch_spirv_graph (it deprecates those; the specification
# still names them so).
COMMAND_ALIASES = {"dispatch_vgf": "dispatch_graph", "frame_boundary": "mark_boundary", "pipeline_barrier": "dispatch_barrier",
                   "dispatch_data_graph": "dispatch_spirv_graph"}

# Nested JSON objects and how to build them: (dataclass field name) -> constructor of one element.
_NESTED: dict[str, Any] = {
    "specialization_constants": lambda d: SpecializationConstant(d["id"], d["value"]),
    "specialization_constants_map": lambda d: SpecializationConstantMap(
        tuple(SpecializationConstant(s["id"], s["value"]) for s in d.get("specialization_constants", ())),
        d["shader_target"],
    ),
    "shader_substitutions": lambda d: ShaderSubstitution(d["shader_ref"], d["target"]),
    "bindings": lambda d: Binding(**d),
    "push_constants": lambda d: PushConstantMap(d["push_data_ref"], d["shader_target"]),
    "color_attachment_refs": lambda d: AttachmentRef(d) if isinstance(d, str) else AttachmentRef(d["resource_ref"], d.get("lod", 0)),
}


# The reference runner (0.11) spells barrier enums in lower case ("compute_shader_write", "compute", "general");
# the specification in upper case. The schema accepts both; the model keeps the specification's spelling.
_ACCESS = ("MEMORY_WRITE", "MEMORY_READ", "GRAPH_WRITE", "GRAPH_READ", "COMPUTE_SHADER_WRITE", "COMPUTE_SHADER_READ")
_SPEC_SPELLING: dict[str, dict[str, str]] = {
    "access": {a.lower(): f"ACCESS_{a}" for a in _ACCESS},
    "stage": {s.lower(): s for s in ("GRAPH", "COMPUTE", "ALL")},
    "layout": {v.lower(): f"IMAGE_LAYOUT_{v}" for v in ("TENSOR_ALIASING", "GENERAL", "UNDEFINED")},
}
_SPELLED_FIELDS = {"src_access": "access", "dst_access": "access", "src_stage": "stage", "dst_stage": "stage",
                   "old_layout": "layout", "new_layout": "layout"}


def _convert(name: str, value: Any) -> Any:
    """Turn one validated JSON value into the model's representation of field ``name``."""
    if name == "memory_group":  # the specification names the group "uid", the reference runner "id"
        return (value.get("uid") or value.get("id") or "") if isinstance(value, dict) else str(value)
    if name in _SPELLED_FIELDS:
        table = _SPEC_SPELLING[_SPELLED_FIELDS[name]]
        if isinstance(value, list):
            return tuple(table.get(v, v) for v in value)
        return table.get(value, value)
    if name == "subresource_range":
        return SubresourceRange(**value)
    if name == "rangeND":
        dims = tuple(int(v) for v in value)
        return dims + (1,) * (3 - len(dims))
    if name == "bindings" and isinstance(value, dict):  # dispatch_optical_flow: images by role
        return tuple(OpticalFlowBinding(**value[role], role=role) for role in OPTICAL_FLOW_ROLES if value.get(role))
    if name in _NESTED:
        return tuple(_NESTED[name](v) for v in value)
    if isinstance(value, list):
        return tuple(value)
    return value


def _build(cls: type, index: int, body: dict[str, Any]) -> Any:
    known = {f.name for f in fields(cls)}
    kwargs = {k: _convert(k, v) for k, v in body.items() if k in known and k != "index"}
    group = body.get("memory_group")
    if "memory_offset" in known and isinstance(group, dict):
        kwargs["memory_offset"] = int(group.get("offset", 0))
    return cls(index=index, **kwargs)


@dataclass(frozen=True)
class Scenario:
    """A validated scenario: resources and commands in file order, looked up by uid."""

    path: Path
    document: dict[str, Any] = field(repr=False, compare=False)
    resources: tuple[AnyResource, ...]
    commands: tuple[AnyCommand, ...]
    by_uid: dict[str, AnyResource] = field(repr=False, compare=False)
    confined: bool = False  # loaded from a trace: every path stays inside base_dir (see .confine)

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def src_path(self, relative: str) -> Path:
        """Resolve a ``src``-like path: absolute as is, else against the scenario's folder. A confined
        scenario's path must stay inside its folder (:func:`vkcore.scenario.confine.confined_path`)."""
        if self.confined:
            return confined_path(self.base_dir, relative, file=self.path)
        p = Path(relative)
        return p if p.is_absolute() else self.base_dir / p

    def dst_path(self, relative: str, output_dir: Path | None) -> Path:
        """Resolve a ``dst`` path: absolute as is, else against ``--output`` (default: scenario folder);
        a confined scenario's only inside that folder."""
        if self.confined:
            return confined_path(output_dir or self.base_dir, relative, file=self.path)
        p = Path(relative)
        return p if p.is_absolute() else (output_dir or self.base_dir) / p

    def of_kind(self, cls: type[Resource]) -> list[Any]:
        return [r for r in self.resources if isinstance(r, cls)]


def scenario_from_document(document: dict[str, Any], path: Path, *, confined: bool = False) -> Scenario:
    """Build the model from an already validated document (see :func:`vkcore.scenario.load.load_scenario`)."""
    resources: list[Any] = []
    for i, item in enumerate(document.get("resources", [])):
        (kind, body), = item.items()
        resources.append(_build(RESOURCE_KINDS[kind], i, body))
    commands: list[Any] = []
    for i, item in enumerate(document.get("commands", [])):
        (kind, body), = item.items()
        command = _build(COMMAND_KINDS[COMMAND_ALIASES.get(kind, kind)], i, body)
        commands.append(command if kind == command.KIND else dataclasses.replace(command, spelled=kind))
    return Scenario(
        path=path,
        document=document,
        resources=tuple(resources),
        commands=tuple(commands),
        by_uid={r.uid: r for r in resources},
        confined=confined,
    )
