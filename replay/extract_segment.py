"""``extract --segment K``: one segment of a graph dispatch of a trace as a standalone scenario.

A ``dispatch_graph`` / ``dispatch_vgf`` runs the segments of its VGF in order (GRAPH segments: data graph
pipelines; COMPUTE segments: shaders), passing tensors between them through the graph's intermediates.
When bisect names the first divergent segment, the reproducer a driver team wants is that segment alone.

Guarantees of :func:`extract_segment` (beyond those of :func:`replay.extract.extract`, which it shares:
the folder's layout, ``vkcap.json``, the README, nothing half-written):

- **One segment, in a VGF of its own.** ``scenario.json`` holds one ``dispatch_vgf`` of
  ``files/<graph file>.segment<K>.vgf``, a VGF (written with ARM's encoder, ``vgfpy``) holding segment K
  alone: its module (GRAPH: the data graph SPIR-V as the original carries it; COMPUTE: the SPIR-V that
  ran: the module's own, the module's GLSL compiled as vkcap compiles it, or, where the scenario
  substitutes the module, the substituted shader's SPIR-V: as the trace recorded it, else compiled from
  the source the trace embeds, as the replay compiles it), every resource its descriptor sets bind (same
  sets and bindings; the graph's intermediates among them become model inputs, or outputs when the segment
  writes them: the model's binding ids are the descriptor bindings), the graph constants it uses with
  their graph constant ids, its dispatch shape and push constant ranges, segment and module names
  unchanged. The scenario holds exactly what that needs: the graph resource
  (its ``push_constants_size`` and ``specialization_constants_map`` for the segment's module; no
  substitution, the code is in the VGF), the tensors (or buffers) the segment binds (an intermediate
  ``<graph>/intermediate_<i>`` as tensor ``<graph>_intermediate_<i>``), and the push constant data the
  command gives the module. Both ``vkcap run`` and ARM's ``scenario-runner`` run it.
- **The inputs are the state right before the segment.** For K > 0: every bound resource as the replay
  (the trace's own shaders, on this device) left it right after segment K - 1 of that command, checked
  against the recording's snapshot after segment K - 1 where it has one (``matches`` / ``differs``, else
  ``unrecorded``). For K = 0: the scenario's resources as right before the command (exactly as a whole
  extract takes them); an intermediate holds no state before the command a recording could hold, and
  segment 0 is what writes it: it starts from zeros (``zeros``).
- **The outputs.** What segment K writes gets a ``dst``; ``expected/`` holds the recording's snapshot
  after segment K (``--dispatch-level`` recordings), or, for a scenario resource no later segment nor
  later dispatch of the frame writes, the frame's boundary snapshot.
- **Refusals** (one line, exit 2, nothing written): those of a whole extract; ``--segment`` on a command
  that is not a VGF graph dispatch; an index outside the VGF's segments (they are listed, with their
  modules); a segment whose resources share a binding number across descriptor sets (a model's inputs and
  outputs are bound by binding id alone); ``vgfpy`` not installed (the line says how to install it).

Alias groups are not carried over: each resource of the segment is a resource of its own in the extract.
"""
from __future__ import annotations

import io
import json
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capture.format.records import content_key
from capture.trace import DispatchSnapshot, FrameRecord, Trace
from vkcore.errors import UsageError
from vkcore.graphs.dispatch import BUFFER_DESCRIPTORS, compute_module_code
from vkcore.graphs.vgf import CodeKind, ModuleType, ResourceCategory, read_vgf
from vkcore.safe_text import shown
from vkcore.shaders.compile import load_shader

from .extract import (
    PLACEHOLDER,
    RECORDED_SCENARIO,
    SCENARIO,
    Divergence,
    Extracted,
    Located,
    Target,
    _device_words,
    _files,
    _read_live,
    _recorded_outputs,
    _scenario,
    _state_before,
    _write_folder,
    candidate_shaders,
    compare_spec,
    embedded_file,
    folder_target,
    locate,
    source_file,
    readme_divergence,
    readme_run,
)
from .options import ReplayOptions

GRAPH_KINDS = ("dispatch_graph", "dispatch_vgf")
INSTALL = "pip install ai-ml-sdk-vgf-library (ARM's VGF library, CPython 3.11; or pip install 'vkcap[vgf]')"


def vgf_encoder() -> Any:
    """ARM's ``vgfpy`` module; a :class:`UsageError` saying how to install it where it is missing."""
    try:
        # lazy: vgfpy is optional: only extract --segment needs it, and this says how to install it
        import vgfpy
    except ImportError:
        raise UsageError(f"--segment writes the segment as a VGF with ARM's vgfpy, which is not installed: {INSTALL}") from None
    return vgfpy


def has_vgf_encoder() -> bool:
    try:
        vgf_encoder()
    except UsageError:
        return False
    return True


@dataclass
class _Bound:
    """One resource segment K binds."""

    resource_index: int  # in the original VGF's resource table
    trace_name: str  # the scenario uid, or the intermediate's name in the trace (``<graph>/intermediate_<i>``)
    uid: str  # its uid in the extract
    scenario: bool  # a scenario resource (else an intermediate of the graph)
    writes: bool  # the segment writes it (one of its outputs)
    set_index: int
    binding: int
    binding_json: dict[str, Any] = field(default_factory=dict)  # the command's binding of a scenario resource


@dataclass
class _Code:
    """What a segment's module runs, and where that comes from."""

    spirv: bytes
    entry: str
    note: str  # for the README: "the module's own SPIR-V", ...
    sources: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # key -> (file name, source text), for reading
    shader_json: dict[str, Any] | None = None  # the substituted shader's resource JSON


def segment_list(vgf: Any) -> str:
    """``0 graph_partition_0 (GRAPH), 1 graph_partition_1 (COMPUTE), ...``: the segments, by module."""
    return ", ".join(f"{s.index} {vgf.module_of(s).name} ({s.type.name})" for s in vgf.segments)


def extract_segment(trace_path: Path, seq: int, index: int, segment: int, out: Path, options: ReplayOptions,
                    divergence: Divergence | None = None, argv: list[str] | None = None,
                    *, force: bool = False, place: str = "-o") -> Extracted:
    """Write segment ``segment`` of the graph dispatch ``index`` of frame ``seq`` of the trace as a
    standalone scenario into ``out``: :func:`replay.extract.extract`'s checks and arguments, then
    :func:`extract_located` while the rebuilt scenario exists."""
    target = folder_target(trace_path, out, place=place, force=force)
    with Trace.open(trace_path) as trace, tempfile.TemporaryDirectory(prefix="vkcap-extract-") as tmp:
        at = locate(trace, seq, index, Path(tmp))
        return extract_located(at, segment, target, options, divergence, argv, trace_path)


def extract_located(at: Located, segment: int, target: Target, options: ReplayOptions,
                    divergence: Divergence | None, argv: list[str] | None, trace_path: Path) -> Extracted:
    """Write segment ``segment`` of the graph dispatch ``at`` as a standalone scenario into ``target`` (see
    the module docstring; file names derived from the graph's file and module names go through
    ``target.names``)."""
    trace, index, seq = at.trace, at.index, at.record.seq
    if at.kind_name not in GRAPH_KINDS:
        raise UsageError(f"--segment {segment}: commands[{index}] is a {at.kind_name}, not a graph dispatch "
                         f"({' or '.join(GRAPH_KINDS)}): it has no segments", file=trace.path)
    graph = at.scenario.by_uid[at.cmd.graph_ref]
    vgf = read_vgf(at.scenario.src_path(graph.src))
    if not 0 <= segment < len(vgf.segments):
        raise UsageError(f"--segment {segment}: graph '{graph.uid}' of commands[{index}] has segments 0 to "
                         f"{len(vgf.segments) - 1}: {segment_list(vgf)}", file=trace.path)
    vgfpy = vgf_encoder()
    seg = vgf.segments[segment]
    module = vgf.module_of(seg)
    bound = _bound(at, vgf, seg, graph.uid)
    code = _code(at, vgf, seg, module, graph)
    vgf_name = f"{Path(graph.src).stem}.segment{segment}.vgf"
    vgf_bytes = _encode(vgfpy, vgf, seg, module, bound, code)

    graph_json = _graph_json(at, graph.uid, vgf_name, seg, module, code)
    command = _command(at, graph.uid, bound, module.name)
    resources: dict[str, dict[str, Any]] = {graph.uid: {"graph": graph_json}}
    meta: dict[str, dict[str, Any]] = {}
    for b in bound:
        if b.uid in resources:
            continue
        r = vgf.resources[b.resource_index]
        if b.scenario:
            resources[b.uid] = at.resources[b.uid]
            meta[b.uid] = {"kind": next(iter(at.resources[b.uid])), **trace.resources.get(b.uid, {})}
        else:
            resources[b.uid], meta[b.uid] = _intermediate(b, r, trace.resources.get(b.trace_name))
    for p in command["dispatch_vgf"].get("push_constants", []):
        resources.setdefault(p["push_data_ref"], at.resources[p["push_data_ref"]])
    uids = list(resources)
    data = list(meta)
    writes = list(dict.fromkeys(b.uid for b in bound if b.writes))

    inputs, verdicts = _state_before_segment(at, options, segment, bound, meta)
    expected = _outputs_after_segment(at, vgf, segment, bound, divergence.reference if divergence else {},
                                      divergence.reference_words if divergence else "")
    files = _files(trace, at.document, resources, uids, target.names)
    files[embedded_file(target.names, vgf_name)] = vgf_bytes
    files.update((source_file(target.names, key, name), text) for key, (name, text) in code.sources.items())
    result = Extracted(target.out, seq, index, at.kind_name, at.name, uids, verdicts,
                       {u: where for u, (where, _) in expected.items()}, segment=segment)
    provenance = at.provenance(trace_path)
    provenance["segment"] = {
        "index": segment, "name": seg.name, "module": module.name, "type": seg.type.name, "vgf": embedded_file(target.names, vgf_name),
        "code": code.note, "constants": len(seg.constant_bindings), "segments": segment_list(vgf),
        "intermediates": {b.uid: b.trace_name for b in bound if not b.scenario},
    }
    scenario_doc = _scenario(command, resources, uids, data, writes, meta, target.names)
    compared = compare_spec(trace, options, [b.trace_name for b in bound if b.writes])  # by the trace's names
    provenance["compare"] = {b.uid: compared[b.trace_name] for b in bound if b.writes}
    scenarios = {SCENARIO: scenario_doc}
    replaced = _replaced_module_shader(at, module.name, options.replace_shaders)
    if replaced is not None and seg.type.name == "COMPUTE":
        candidate = candidate_shaders(trace, options.replace_shaders, [replaced], target.names)[replaced]
        files.update(candidate.files)
        scenarios = {SCENARIO: _substituted(scenario_doc, replaced, candidate.spirv_file, module.name),
                     RECORDED_SCENARIO: scenario_doc}
        provenance["candidate_shaders"] = {replaced: {"spirv": candidate.spirv_file, "source": candidate.source_file,
                                                      "from": str(candidate.given)}}
    _write_folder(target, scenarios, files, inputs, expected, meta, result, provenance, options, divergence, argv,
                  readme_of=readme)
    return result


def _replaced_module_shader(at: Located, module_name: str, replace_shaders: tuple[tuple[str, Path], ...]) -> str | None:
    """The replaced shader (a ``--replace-shader`` uid) that the graph or the command substitutes for
    module ``module_name``, or None."""
    graph = at.resources.get(at.command[at.kind_name].get("graph_ref"), {}).get("graph", {})
    substitutions = [*graph.get("shader_substitutions", []), *at.command[at.kind_name].get("shader_substitutions", [])]
    replaced = {uid for uid, _ in replace_shaders}
    return next((s["shader_ref"] for s in substitutions
                 if isinstance(s, dict) and s.get("target") == module_name and s.get("shader_ref") in replaced), None)


def _substituted(scenario: dict[str, Any], uid: str, spirv_file: str, module_name: str) -> dict[str, Any]:
    """``scenario`` with the shader ``spirv_file`` substituted for module ``module_name`` on its one command
    (the candidate of a segment extract)."""
    doc = json.loads(json.dumps(scenario))
    taken = {next(iter(r.values())).get("uid") for r in doc["resources"]}
    name = uid if uid not in taken else f"{uid}.candidate"
    doc["resources"].append({"shader": {"uid": name, "src": spirv_file, "type": "SPIR-V"}})
    (body,) = doc["commands"][0].values()
    body["shader_substitutions"] = [{"shader_ref": name, "target": module_name}]
    return doc


def _bound(at: Located, vgf: Any, seg: Any, graph_uid: str) -> list[_Bound]:
    """What the segment's descriptor sets bind, in their order: each resource once, at its first place."""
    model = {b.binding: b.resource_index for b in (*vgf.outputs, *vgf.inputs)}
    scenario_of: dict[int, tuple[str, dict[str, Any]]] = {}
    body = at.command[at.kind_name]
    for j, b in enumerate(at.cmd.bindings):
        if b.id in model:
            scenario_of.setdefault(model[b.id], (b.resource_ref, body["bindings"][j]))
    writes = {s.resource_index for s in seg.outputs}
    taken = set(at.resources)
    out: list[_Bound] = []
    places: dict[int, tuple[int, int]] = {}
    for ds in seg.descriptor_sets:
        for b in ds.bindings:
            i = b.resource_index
            if i in places:
                continue
            other = next((k for k, (s, n) in places.items() if n == b.binding), None)
            if other is not None:
                raise UsageError(f"segment {seg.index} ('{seg.name}') binds resource {other} at set {places[other][0]} "
                                 f"binding {b.binding} and resource {i} at set {ds.set_index} binding {b.binding}: a "
                                 "VGF's inputs and outputs are bound by binding number alone, so this segment has no "
                                 "standalone form", file=at.trace.path)
            places[i] = (ds.set_index, b.binding)
            if i in scenario_of:
                uid, binding_json = scenario_of[i]
                out.append(_Bound(i, uid, uid, True, i in writes, ds.set_index, b.binding, binding_json))
                continue
            category = vgf.resources[i].category
            if category is not ResourceCategory.INTERMEDIATE:  # the checks of a graph dispatch refuse these
                raise UsageError(f"segment {seg.index} binds resource {i} ({category.name}), which commands[{at.index}] "
                                 "does not bind", file=at.trace.path)
            uid = f"{graph_uid}_intermediate_{i}"
            while uid in taken:
                uid += "_"
            taken.add(uid)
            out.append(_Bound(i, f"{graph_uid}/intermediate_{i}", uid, False, i in writes, ds.set_index, b.binding))
    return out


def _code(at: Located, vgf: Any, seg: Any, module: Any, graph: Any) -> _Code:
    """The code segment K's module ran (see the module docstring)."""
    trace = at.trace
    if seg.type is ModuleType.GRAPH:
        assert isinstance(module.code, bytes)
        return _Code(module.code, module.entry_point, "the module's data graph SPIR-V, as the original VGF carries it")
    substitutions = [*graph.shader_substitutions, *(getattr(at.cmd, "shader_substitutions", ()) or ())]
    sub = next((s for s in substitutions if s.target == module.name), None)
    if sub is not None:
        shader = at.resources.get(sub.shader_ref, {}).get("shader", {})
        sources = {}
        src = shader.get("src")
        if isinstance(src, str) and src in trace.files and not src.endswith(".spv"):
            sources[src] = (Path(src).name, trace.file_bytes(src))
        what = f"the SPIR-V of shader '{sub.shader_ref}', which the scenario substitutes for module '{module.name}'"
        if sub.shader_ref in trace.spirv:
            spirv = bytes(trace.blob(trace.spirv[sub.shader_ref], what=f"SPIR-V of shader '{sub.shader_ref}'"))
            return _Code(spirv, shader.get("entry", "main"), f"{what} (as the trace recorded it)", sources, shader)
        # A trace recorded before substitutions' SPIR-V was recorded (2026-11-27): the replay compiles
        # the embedded source again, and so does this.

        spec = at.scenario.by_uid[sub.shader_ref]
        compiled = load_shader(at.scenario, spec)
        how = "as the trace embeds it" if spec.type == "SPIR-V" else "compiled from its source as vkcap compiles it"
        return _Code(compiled.code, compiled.entry, f"{what} ({how})", sources, shader)
    compiled = compute_module_code(at.scenario, graph, module, seg, f"{graph.uid}::{module.name}",
                                   str(at.scenario.src_path(graph.src)))
    if module.code_kind is CodeKind.GLSL:
        return _Code(compiled.code, compiled.entry, "the module's GLSL, compiled to SPIR-V as vkcap compiles it",
                     {f"{graph.uid}::{module.name}": (f"{module.name}.comp", str(module.code).encode("utf-8"))})
    return _Code(compiled.code, compiled.entry, "the module's own SPIR-V")


def _encode(vgfpy: Any, vgf: Any, seg: Any, module: Any, bound: list[_Bound], code: _Code) -> bytes:
    """The VGF of segment K alone (see the module docstring), as bytes."""
    encoder = vgfpy.CreateEncoder(vgf.vk_header_version or 275)
    refs: dict[int, Any] = {}
    for b in bound:
        r = vgf.resources[b.resource_index]
        add = encoder.AddOutputResource if b.writes else encoder.AddInputResource
        strides = list(r.strides or ()) if b.scenario else []  # an intermediate becomes a packed scenario tensor
        refs[b.resource_index] = add(r.descriptor_type, r.format, list(r.shape), strides)
    constants: dict[int, Any] = {}
    constant_bindings = []
    for cb in seg.constant_bindings:
        if cb.constant_index not in constants:
            c = vgf.constants[cb.constant_index]
            r = vgf.resource_of(c)
            resource = encoder.AddConstantResource(r.format, list(r.shape), list(r.strides or ()))
            sparsity = -1 if c.sparsity_dimension is None else c.sparsity_dimension
            constants[cb.constant_index] = encoder.AddConstant(resource, c.read(), sparsity)
        constant_bindings.append(vgfpy.GraphConstantBindingRef(cb.graph_constant_id, constants[cb.constant_index]))
    words = list(struct.unpack(f"<{len(code.spirv) // 4}I", code.spirv))
    kind = vgfpy.ModuleType.Graph if seg.type is ModuleType.GRAPH else vgfpy.ModuleType.Compute
    module_ref = encoder.AddModule(kind, module.name, code.entry, words)
    sets = []
    for ds in seg.descriptor_sets:
        slots = [encoder.AddBindingSlot(b.binding, refs[b.resource_index]) for b in ds.bindings]
        sets.append(encoder.AddDescriptorSetInfo(slots, ds.set_index) if ds.explicit else encoder.AddDescriptorSetInfo(slots))
    inputs = [encoder.AddBindingSlot(s.binding, refs[s.resource_index]) for s in seg.inputs if s.resource_index in refs]
    outputs = [encoder.AddBindingSlot(s.binding, refs[s.resource_index]) for s in seg.outputs if s.resource_index in refs]
    ranges = [encoder.AddPushConstRange(p.stage_flags, p.offset, p.size) for p in seg.push_constant_ranges]
    encoder.AddSegmentInfo(module_ref, seg.name, sets, inputs, outputs, constant_bindings,
                           list(seg.dispatch_shape or (0, 0, 0)), ranges)
    names = _model_names(vgf)
    ins = [b for b in bound if not b.writes]
    outs = [b for b in bound if b.writes]
    encoder.AddModelSequenceInputsOutputs(
        [encoder.AddBindingSlot(b.binding, refs[b.resource_index]) for b in ins], [names.get(b.resource_index, b.uid) for b in ins],
        [encoder.AddBindingSlot(b.binding, refs[b.resource_index]) for b in outs], [names.get(b.resource_index, b.uid) for b in outs])
    encoder.Finish()
    buffer = io.BytesIO()
    if not encoder.WriteTo(buffer):
        raise UsageError(f"vgfpy could not write the VGF of segment {seg.index} ('{seg.name}')")
    return buffer.getvalue()


def _model_names(vgf: Any) -> dict[int, str]:
    """The original model's input and output names, by resource index."""
    return {b.resource_index: b.name for b in (*vgf.inputs, *vgf.outputs) if b.name}


def _graph_json(at: Located, graph_uid: str, vgf_name: str, seg: Any, module: Any, code: _Code) -> dict[str, Any]:
    """The graph resource of the extract: the segment's VGF, with the push constant size and the
    specialization constants its module ran with (no substitution: the code is in the VGF)."""
    original = at.resources[graph_uid]["graph"]
    body: dict[str, Any] = {"uid": graph_uid, "src": vgf_name}
    if seg.type is not ModuleType.COMPUTE:
        return body
    shader = code.shader_json or {}
    from_ranges = max((r.offset + r.size for r in seg.push_constant_ranges), default=0)
    size = original.get("push_constants_size") or shader.get("push_constants_size") or from_ranges
    if size:
        body["push_constants_size"] = size
    maps = [m for m in original.get("specialization_constants_map", []) if m.get("shader_target") == module.name]
    if not maps and shader.get("specialization_constants"):
        maps = [{"shader_target": module.name, "specialization_constants": shader["specialization_constants"]}]
    if maps:
        body["specialization_constants_map"] = maps
    return body


def _command(at: Located, graph_uid: str, bound: list[_Bound], module_name: str) -> dict[str, Any]:
    """The extract's one command: a ``dispatch_vgf`` binding each resource at its set and binding."""
    original = at.command[at.kind_name]
    bindings = []
    for b in bound:
        extra = {k: v for k, v in b.binding_json.items() if k not in ("set", "id", "resource_ref")}
        bindings.append({"set": b.set_index, "id": b.binding, "resource_ref": b.uid, **extra})
    body: dict[str, Any] = {"graph_ref": graph_uid, "bindings": bindings}
    push = [p for p in original.get("push_constants", []) if p.get("shader_target") == module_name]
    if push:
        body["push_constants"] = push
    if "implicit_barrier" in original:
        body["implicit_barrier"] = original["implicit_barrier"]
    return {"dispatch_vgf": body}


def _intermediate(b: _Bound, r: Any, recorded: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """An intermediate as a resource of the extract (its JSON) and its file's description."""
    if r.descriptor_type in BUFFER_DESCRIPTORS:
        size = int(r.packed_nbytes or 0)
        return ({"buffer": {"uid": b.uid, "size": size, "shader_access": "readwrite"}},
                {"kind": "buffer", "size": size, **(recorded or {})})
    body = {"uid": b.uid, "dims": list(r.shape), "format": r.format_name, "shader_access": "readwrite"}
    return {"tensor": body}, {"kind": "tensor", "format": r.format_name, "dims": list(r.shape),
                              "size": int(r.packed_nbytes or 0), **(recorded or {})}


def _state_before_segment(at: Located, options: ReplayOptions, segment: int, bound: list[_Bound],
                          meta: dict[str, dict[str, Any]]) -> tuple[dict[str, bytes], dict[str, str]]:
    """The bytes of each bound resource right before segment K, and where they come from."""
    record, index = at.record, at.index
    if segment == 0:
        scenario = list(dict.fromkeys(b.uid for b in bound if b.scenario))
        before, where = _state_before(at.trace, options, record, at.before, scenario, index)
        for b in bound:
            if not b.scenario:
                before[b.uid], where[b.uid] = bytes(meta[b.uid]["size"]), "zeros"
        return before, where
    names = list(dict.fromkeys(b.trace_name for b in bound))
    target = FrameRecord(record.seq, record.pass_index, record.index, record.frame_id, {},
                         tuple(DispatchSnapshot(index, name, PLACEHOLDER, segment - 1) for name in names))
    sizes = {b.trace_name: int(meta[b.uid]["size"]) for b in bound if not b.scenario}
    captured = _read_live(at.trace, options, {record.seq: target}, sizes)
    recorded = {d.uid: d.blob for d in record.dispatches if d.command == index and d.segment == segment - 1}

    inputs: dict[str, bytes] = {}
    verdicts: dict[str, str] = {}
    for b in bound:
        live = inputs[b.uid] = captured[(record.seq, index, b.trace_name)]
        key = recorded.get(b.trace_name)
        verdicts[b.uid] = "unrecorded" if key is None else "matches" if content_key(live).hex() == key else "differs"
    return inputs, verdicts


def _outputs_after_segment(at: Located, vgf: Any, segment: int, bound: list[_Bound], reference: dict[str, bytes],
                           reference_words: str) -> dict[str, tuple[str, bytes | None]]:
    """uid -> (where the trace recorded it right after segment K, its bytes), for what segment K writes;
    where the trace holds no such value, the output of bisect's reference side after segment K
    (``reference``: by the trace's names), when it ran one."""
    record, index, trace = at.record, at.index, at.trace
    later = {o.resource_index for after in vgf.segments[segment + 1:] for o in after.outputs}
    out: dict[str, tuple[str, bytes | None]] = {}
    for b in bound:
        if not b.writes or b.uid in out:
            continue
        shot = next((d for d in record.dispatches if d.command == index and d.segment == segment
                     and d.uid == b.trace_name), None)
        if shot is not None:
            out[b.uid] = (f"the snapshot after segment {segment} of commands[{index}]",
                          bytes(trace.blob(shot.blob, what=b.trace_name)))
        elif b.scenario and b.resource_index not in later:
            out.update(_recorded_outputs(trace, record, index, [b.uid], at.later_writes))
        else:
            out[b.uid] = ("", None)
        if out[b.uid][1] is None and b.trace_name in reference:
            out[b.uid] = (f"bisect's reference side ({reference_words}), right after segment {segment} of "
                          f"commands[{index}]", reference[b.trace_name])
    return out


def readme(doc: dict[str, Any], out: Path) -> str:
    """The README of a segment's extract; every text from the trace or its VGF goes through :func:`shown`."""
    seg = {k: shown(v) if isinstance(v, str) else v for k, v in doc["segment"].items()}
    k = seg["index"]
    renamed = ", ".join(f"`{shown(u)}` (the trace's `{shown(name)}`)" for u, name in seg["intermediates"].items())
    parts = [f"its module ({seg['code']})", "the resources its descriptor sets bind (at the same sets and bindings)"]
    if seg["constants"]:
        parts.append(f"its {seg['constants']} graph constant binding(s) (the same graph constant ids)")
    if seg["type"] == "COMPUTE":
        parts.append("its dispatch shape and push constant ranges")
    lines = [f"# segment {k} ({seg['module']}) of commands[{doc['command']}] of frame {doc['frame']} of "
             f"{shown(Path(doc['trace']).name)}", "",
             f"A standalone scenario of segment {k} (`{seg['name']}`, a {seg['type']} segment running module "
             f"`{seg['module']}`) of a {shown(doc['kind'])} ({shown(doc['name'])}), extracted by vkcap "
             f"{shown(doc['vkcap'])} from `{shown(doc['trace'])}`: frame {doc['frame']} (frame_id {doc['frame_id']}), "
             f"`commands[{doc['command']}]`. "
             f"Its one `dispatch_vgf` runs `{seg['vgf']}`, a VGF holding that segment alone: " + _words(parts) + "." +
             (f" The graph's intermediates it binds are tensors here: {renamed}." if renamed else ""), "",
             f"The graph's segments: {seg['segments']}.", "",
             f"- recorded on: {_device_words(doc['recorded_device'])}",
             f"- inputs read on: {_device_words(doc['extract_device'])}, by replaying the trace up to " +
             ("the command" if k == 0 else f"segment {k - 1} of the command"), ""]
    lines += readme_divergence(doc)
    div = doc.get("divergence")
    candidate = doc.get("candidate_shaders") or {}
    if candidate:
        (uid, shader), = candidate.items()
        lines += [f"`scenario.json` substitutes the replacement (`{shown(shader['spirv'])}`, from "
                  f"`{shown(shader['from'])}`) for module `{seg['module']}` on its `dispatch_vgf` (`shader_substitutions`); "
                  "`scenario.recorded.json` runs the module as recorded.", ""]
    elif div and div.get("replaced_shaders") and seg["type"] == "COMPUTE":
        lines += [f"To run another shader in the module's place, add it as a shader resource and give the "
                  f"`dispatch_vgf` `\"shader_substitutions\": [{{\"shader_ref\": \"<its uid>\", \"target\": "
                  f"\"{seg['module']}\"}}]` (vkcap and ARM's runner read substitutions there).", ""]
    differ = [shown(u) for u, v in doc["inputs"].items() if v == "differs"]
    zeros = [shown(u) for u, v in doc["inputs"].items() if v == "zeros"]
    lines += readme_run(out, bool(candidate)) + [
        "## Files", "",
        f"- `scenario.json`: the one `dispatch_vgf` and the resources it binds; `{seg['vgf']}`: the segment's VGF "
        f"(`vkcap vgf {seg['vgf']}` lists it)" + ("; `shaders/source/`: the module's source, for reading"
                                                 if seg["type"] == "COMPUTE" else ""),
        f"- `inputs/`: each bound resource as it was right before segment {k}" +
        (f" (these differ from the recording: {', '.join(differ)})" if differ else "") +
        (f"; {', '.join(zeros)}: zeros (an intermediate holds no state before the command; segment 0 writes it)"
         if zeros else ""),
        f"- `expected/`: each output right after segment {k}: " + (", ".join(
            f"`{shown(u)}` ({shown(where)})" for u, where in doc["expected"].items() if where) or "none"),
        "- `check.sh`: runs the scenario and compares its outputs with `expected/` (above)",
        "- `vkcap.json`: the same, as data"]
    missing = [shown(u) for u, where in doc["expected"].items() if not where]
    if missing:
        lines += ["", f"Neither the recording nor a reference run holds a value of {', '.join(missing)} right after "
                  f"segment {k} (record with `--dispatch-level` to have one)."]
    return "\n".join(lines) + "\n"


def _words(parts: list[str]) -> str:
    """``a, b and c``."""
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
