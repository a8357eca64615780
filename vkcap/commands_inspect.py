"""``vkcap info`` and ``vkcap export``: what a trace holds, and one snapshot of it as a file (no device)."""
from __future__ import annotations

import argparse
import io
import json
import math
from pathlib import Path
from typing import Any

from vkcore.errors import TraceError, UsageError
from vkcore.resources.files import SUFFIXES as EXPORT_SUFFIXES, write_resource_file
from vkcore.safe_text import rich_text, shown


def snapshot_figures(summary: dict[str, Any]) -> str:
    """The snapshot totals as ``info`` and ``record`` print them (definitions: :func:`trace_summary`)."""
    ratio = summary["ratio"]
    return (f"{size_text(summary['snapshot_raw_bytes'])} captured, {size_text(summary['snapshot_stored_bytes'])} stored"
            f"{f' ({ratio:.1f}x)' if ratio else ''}, deduplication saved {size_text(summary['dedup_saved_bytes'])}"
            + (f", {summary['snapshot_deltas']} stored as deltas" if summary.get("snapshot_deltas") else ""))


def size_text(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def trace_summary(path: Path) -> dict[str, Any]:
    """Everything ``vkcap info`` shows (and ``record`` sums up), as plain data. The snapshot figures
    (``resources`` and the totals) are defined in :mod:`capture.tally`. ``checkpoints`` lists the
    checkpoints after frames; ``initial_state`` says whether checkpoint -1 (the state before the first
    frame) is there. ``frame_range`` is [first, last] frame number (None without frames);
    ``trimmed_from`` is what ``vkcap trim`` recorded of a trimmed trace's source (None for a
    recording). Checkpoint-only state, embedded files and metadata are in ``file_bytes`` only. ``views``
    maps each buffer that has a view (:mod:`capture.views`: recorded in the trace, or derived from its
    SPIR-V) to :func:`view_summary`; a resource row with snapshots repeats its buffer's as ``view``.

    Damage (this reads the whole file once, hashing every record): ``corrupt_records`` lists every
    damaged record (offset, type, kind, the frames it belongs to where known, reason); ``lost_frames``
    the frames the trace should hold but does not; ``missing_blobs`` the snapshots frames name that the
    trace lacks (with their frames); ``bytes_after_trailer`` what follows the trace's own
    TRAILER (appended data or a concatenated trace, never read), with ``trailer_note``. ``intact`` is
    true when none of these is found."""
    # lazy: per command; vkcap --help imports this module, not capture.format.records, capture.tally, capture.trace (with msgpack, xxhash, zstandard)
    from capture.format.records import BlobInfo
    from capture.tally import SnapshotTally
    from capture.trace import Trace

    with Trace.open(path) as trace:
        damaged = trace.damaged_records()
        lost = trace.lost_frames
        missing: dict[str, list[int]] = {}  # blobs frames name that the trace lacks (damaged, or never there)
        tally = SnapshotTally()
        for f in trace.frames:
            def blob_info(key: str, seq: int = f.seq) -> BlobInfo:
                if trace.reader.has_blob(key):
                    return trace.reader.blob_info(key)
                missing.setdefault(key, []).append(seq)
                return BlobInfo(0, 0, 0)

            tally.add_frame(f.snapshots, ((d.uid, d.blob) for d in f.dispatches), blob_info)
        rows = tally.resources()
        views = {uid: view_summary(view, trace.resources.get(uid, {}).get("size")) for uid, view in sorted(_views(trace).items())}
        for uid, view in views.items():
            if uid in rows:
                rows[uid]["view"] = view
        size = path.stat().st_size
        header = trace.header
        return {
            "trace": str(path),
            "file_bytes": size,
            "scenario": trace.scenario_name,
            "recorded": _text_or_none(header.get("created")),
            "vkcap_version": _text_or_none(header.get("vkcap_version")),
            "host": _text_or_none(header.get("host")),
            "fingerprint": _fingerprint(trace.fingerprint),
            "frames": len(trace.frames),
            "passes": len({f.pass_index for f in trace.frames}),
            "frame_range": [trace.frames[0].seq, trace.frames[-1].seq] if trace.frames else None,
            "trimmed_from": _plain(header.get("trimmed_from")),
            "checkpoints": sorted(c for c in trace.checkpoints if c >= 0),
            "initial_state": -1 in trace.checkpoints,
            "checkpoint_every": _plain(header.get("checkpoint_every")),
            "dispatch_level": bool(header.get("dispatch_level")),
            "pipeline_layouts": _pipeline_layouts(header.get("pipeline_layouts")),
            "files": {name: {"role": role, "size": size_} for name, (role, _, size_) in sorted(trace.files.items())},
            "resources": rows,
            "views": views,
            **tally.totals(),
            "status": _text_or_none((trace.end or {}).get("status", "unfinished")) or "unfinished",
            "error": _text_or_none((trace.end or {}).get("error") or None),
            "recovered": trace.recovered,
            "recovery_note": trace.reader.recovery_note or None,
            "corrupt_records": damaged,
            "lost_frames": lost,
            "missing_blobs": [{"key": k, "frames": sorted(set(seqs))} for k, seqs in missing.items()],
            "bytes_after_trailer": trace.reader.bytes_after_trailer,
            "trailer_note": trace.reader.trailer_note or None,
            "intact": not (damaged or lost or missing or trace.reader.bytes_after_trailer),
        }


def _views(trace: Any) -> dict[str, Any]:
    """The trace's buffer views (recorded, or derived from its SPIR-V); none when its SPIR-V is damaged:
    info describes a damaged trace rather than refuse it."""
    # lazy: per command; vkcap --help imports this module, not replay.reading
    from replay.reading import trace_views

    try:
        return trace_views(trace)
    except TraceError:
        return {}


def view_summary(view: Any, size: Any) -> dict[str, Any]:
    """What info says of a buffer's view: ``text`` with the element count a snapshot of ``size`` bytes
    holds (``float32[4096]``), ``type`` without it (``float32[]``), ``elements`` (None without a runtime array or a size), the shader and
    binding it comes from, ``role`` (writer or reader), its ``parts`` (as the trace records them) and the
    ``alternatives`` other shaders have (text, shader, binding)."""
    # lazy: per command; vkcap --help imports this module, not capture.view_arrays
    from capture.view_arrays import elements, sized_text

    nbytes = size if _is_int(size) and size >= 0 else None
    return {"text": sized_text(view, nbytes), "type": view.text, "elements": elements(view, nbytes) if nbytes is not None else None,
            "shader": view.shader, "binding": view.binding, "role": view.role,
            "parts": [p.to_json() for p in view.parts],
            "alternatives": [{"text": a.text, "shader": a.shader, "binding": a.binding} for a in view.alternatives]}


def view_line(uid: str, view: dict[str, Any]) -> str:
    """``out: float32[4096] (shader 'add', binding 0.2)``, with other shaders' views of another type after it."""
    source = f" (shader '{view['shader']}', binding {view['binding']})" if view["shader"] else ""
    others = "".join(f"; shader '{a['shader']}' (binding {a['binding']}) sees {a['text']}" for a in view["alternatives"]
                     if a["text"] != view["type"])
    return f"{uid}: {view['text']}{source}{others}"


# What info shows of a trace's header and fingerprint is the trace's to say, so it is untrusted: each value
# is made plain data of the type shown (a bytes value as hex, a non-finite float as text), or left out.


def _plain(value: Any) -> Any:
    """``value`` (decoded msgpack, at most limits.MAX_NESTING deep) as JSON-able data."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _fingerprint(fp: dict[str, Any]) -> dict[str, Any]:
    """The device fingerprint as plain data; ids that are not integers and layer names that are not
    text are left out (info prints the ids in hexadecimal and joins the names)."""
    out = _plain(fp)
    for key in ("vendor_id", "device_id"):
        if not _is_int(out.get(key, 0)):
            del out[key]
    if not (isinstance(out.get("layers", []), list) and all(isinstance(x, str) for x in out.get("layers", []))):
        del out["layers"]
    return out  # type: ignore[no-any-return]


_LAYOUT_FIELDS = {"command": _is_int, "stage": lambda v: isinstance(v, str), "shader": lambda v: isinstance(v, str)}
_BINDING_FIELDS = {"set": _is_int, "binding": _is_int, "descriptor_type": lambda v: isinstance(v, str),
                   "resource": lambda v: isinstance(v, str)}


def _pipeline_layouts(layouts: Any) -> list[dict[str, Any]]:
    """The header's pipeline layouts that have the fields info prints, of their types; others left out."""
    def fits(d: Any, fields: dict[str, Any]) -> bool:
        return isinstance(d, dict) and all(k in d and ok(d[k]) for k, ok in fields.items())

    if not isinstance(layouts, list):
        return []
    return [_plain(p) for p in layouts if fits(p, _LAYOUT_FIELDS) and isinstance(p.get("bindings"), list)
            and all(fits(b, _BINDING_FIELDS) for b in p["bindings"])]


def cmd_info(args: argparse.Namespace) -> int:
    summary = trace_summary(args.trace)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    # lazy: per command; vkcap --help imports this module, not replay.report
    from replay.report import report_console, report_table

    console = report_console()
    fp = {k: rich_text(v) if isinstance(v, str) else v for k, v in summary["fingerprint"].items()}
    q = rich_text  # every string the trace holds is shown escaped, its markup too
    console.print(f"[bold]{q(summary['trace'])}[/bold]  ({size_text(summary['file_bytes'])})")
    console.print(f"scenario   {q(summary['scenario'])}, recorded {q(summary['recorded'])} on {q(summary['host'])} "
                  f"(vkcap {q(summary['vkcap_version'])})")
    console.print(
        f"device     {fp.get('device_name')} [{fp.get('vendor_id', 0):#06x}:{fp.get('device_id', 0):#06x}], "
        f"driver {fp.get('driver_name')} {fp.get('driver_version')} ({fp.get('driver_info')}), Vulkan {fp.get('api_version')}"
    )
    if fp.get("device_uuid"):  # traces recorded before vkcap named the exact device have none
        ident = {k: q(str(fp.get(k))) for k in ("device_index", "device_uuid", "driver_uuid", "pci_bus")}  # any JSON value
        pci = f", PCI {ident['pci_bus']}" if fp.get("pci_bus") else ""
        console.print(f"           device #{ident['device_index']}, deviceUUID {ident['device_uuid']}, "
                      f"driverUUID {ident['driver_uuid']}{pci}")
    console.print(f"           pipelineCacheUUID {fp.get('pipeline_cache_uuid')}, "
                  f"layers: {q(', '.join(fp.get('layers') or []) or 'none')}")
    span = summary["frame_range"]
    numbered = f" ({span[0]}-{span[1]})" if span and span != [0, summary["frames"] - 1] else ""
    console.print(f"frames     {summary['frames']}{numbered} in {summary['passes']} pass(es); checkpoints at {_checkpoints(summary)}; "
                  f"dispatch-level snapshots: {'yes' if summary['dispatch_level'] else 'no'}")
    same: dict[str, list[int]] = {}  # one line per distinct layout, with every command that has it
    for p in summary["pipeline_layouts"]:
        bindings = ", ".join(f"{b['set']}.{b['binding']} {b['descriptor_type']} {b['resource']}" for b in p["bindings"])
        same.setdefault(f"{p['stage']} shader '{p['shader']}': {bindings or 'no bindings'}", []).append(p["command"])
    for layout, commands in same.items():
        console.print(f"pipeline   commands[{', '.join(map(str, commands))}] {q(layout)}")
    status = summary["status"]
    if summary["recovered"]:
        console.print(f"[yellow]recovered[/yellow]  {q(summary['recovery_note'])}")
    if status != "complete":
        console.print(f"[yellow]status[/yellow]     {q(status)}{': ' + q(summary['error']) if summary['error'] else ''}")
    for c in summary["corrupt_records"]:  # kind and reason may hold trace text: shown escaped, no markup
        frames = f", frame{'s' if len(c['frames']) > 1 else ''} {', '.join(map(str, c['frames']))}" if c["frames"] else ""
        console.print(f"damaged    {c['type']} record at offset {c['offset']} ({shown(c['kind'])}{frames}): {shown(c['reason'])}",
                      markup=False, highlight=False)
    if summary["lost_frames"]:
        # lazy: per command; vkcap --help imports this module, not capture.trace (with msgpack, xxhash, zstandard)
        from capture.trace import seq_ranges

        lost = summary["lost_frames"]
        console.print(f"lost       frame{'s' if len(lost) > 1 else ''} {seq_ranges(lost)}: not in the trace (damaged or missing records)",
                      markup=False, highlight=False)
    for m in summary["missing_blobs"]:
        console.print(f"missing    blob {m['key']} of frames {', '.join(map(str, m['frames']))}: not in the trace",
                      markup=False, highlight=False)
    if summary["bytes_after_trailer"]:
        console.print(f"appended   {shown(summary['trailer_note'])}", markup=False, highlight=False)
    if summary["trimmed_from"] is not None:
        # lazy: per command; vkcap --help imports this module, not replay.trim (with msgpack, vulkan, xxhash, zstandard)
        from replay.trim import describe_provenance

        console.print(f"trimmed    {shown(describe_provenance(summary['trimmed_from']))}", markup=False, highlight=False)
    dispatch_level = summary["dispatch_level"]
    columns = ("resource", "snapshots", *(("after dispatches",) if dispatch_level else ()), "unique", "deltas", "raw",
               "stored", "ratio")
    table = report_table("snapshots by resource (shared blobs count for each)", columns, right=columns[1:])
    for uid, e in summary["resources"].items():
        after = (str(e["dispatch_snapshots"]),) if dispatch_level else ()
        ratio = f"{e['ratio']:.1f}x" if e["ratio"] else "-"
        table.add_row(q(uid), str(e["snapshots"]), *after, str(e["unique"]), str(e["deltas"]), size_text(e["raw_bytes"]),
                      size_text(e["stored_bytes"]), ratio)
    console.print(table)
    for uid, view in summary["views"].items():  # every part is the trace's text: shown escaped, no markup
        console.print(f"view       {shown(view_line(uid, view))}", markup=False, highlight=False)
    console.print(f"snapshots: {snapshot_figures(summary)}" if summary["resources"] else "snapshots: none")
    console.print(f"embedded files: {len(summary['files'])} ({q(', '.join(summary['files']))})")
    return 0


def _checkpoints(summary: dict[str, Any]) -> str:
    """``initial state, 7, 15``: where a replay can start (checkpoint -1 is the initial state)."""
    after = _ranges(summary["checkpoints"]) if summary["checkpoints"] else ""
    if summary["initial_state"]:
        return f"initial state, {after}" if after else "initial state"
    return after or "none"


def _ranges(values: list[int]) -> str:
    if not values:
        return "none"
    if len(values) <= 6:
        return ", ".join(map(str, values))
    return f"{values[0]}, {values[1]}, ... {values[-1]} ({len(values)} in all)"


def cmd_export(args: argparse.Namespace) -> int:
    """A buffer as a .npy typed by its shader's view (:mod:`capture.view_arrays`: ``float32[]`` a float32
    array, ``vec4[]`` shape (n, 4), a struct a structured dtype laid out as the shader lays it out, a
    block's runtime array with its fixed members printed in a line), or as flat int8 like run with
    ``--raw`` or when no shader declares a block for it; tensors as .npy typed by their format, shaped by
    dims; images as .npy, .dds or .png.

    Checked before any snapshot is read, each a one-line error naming the file and the flag: ``-o``
    (see :func:`vkcore.outputs.check_output_target`: not a folder, device node or FIFO, not under a file,
    writable; the suffix the resource's kind exports as), ``--resource`` (a resource of the trace) and
    ``--frame`` (a frame of the trace). A view that cannot shape an array (a forged one) is one line
    naming ``views.UID``, exit 2, nothing written. The output is written atomically."""
    # lazy: per command; vkcap --help imports this module, not capture.trace, vkcore.outputs (with msgpack, xxhash, zstandard)
    from capture.trace import Trace
    from vkcore.outputs import check_output_target

    check_output_target(args.output, place="-o")
    with Trace.open(args.trace) as trace:
        _check_export_request(trace, args.frame, args.resource)
        meta = trace.resources.get(args.resource, {})
        kind = meta.get("kind", "buffer")
        _check_export_suffix(args.output, kind)
        _check_export_meta(trace.path, args.resource, meta)
        view = None
        if kind == "buffer" and not getattr(args, "raw", False):
            # lazy: per command; vkcap --help imports this module, not replay.reading
            from replay.reading import trace_views

            view = trace_views(trace).get(args.resource)
        data = trace.snapshot(args.frame, args.resource)
        if view is not None:
            _export_typed(trace.path, args.output, args.resource, view, data)
            return 0
    write_resource_file(args.output, {"kind": "buffer", **meta}, data)
    return 0


def _export_typed(trace: Path, out: Path, uid: str, view: Any, data: bytes | memoryview) -> None:
    """Write ``data`` as the array ``view`` shapes; say the fixed members a runtime array leaves out."""
    # lazy: per command; vkcap --help imports this module, not capture.view_arrays
    from capture.view_arrays import ViewExportError, header_line, npy_problem, typed_array

    try:
        array, header = typed_array(view, data)
        problem = npy_problem(array)
        if problem is not None:
            raise ViewExportError(problem)
    except ViewExportError as exc:
        raise TraceError(f"the view of '{uid}' cannot shape an array: {exc} (--raw exports its bytes)",
                         file=trace, place=f"views.{uid}") from None
    write_npy(out, array)
    if header:
        print(shown(header_line(uid, view, header, len(array))))


def write_npy(path: Path, array: Any) -> None:
    """``array`` as a .npy file written atomically (the header :func:`npy_header` gives, then its bytes)."""
    # lazy: per command; vkcap --help imports this module, not numpy, vkcore.outputs
    import numpy as np

    from vkcore.outputs import write_atomic

    array = np.asarray(array)
    if not array.flags.c_contiguous:  # np.ascontiguousarray would make a 0-d array 1-d
        array = array.copy(order="C")
    write_atomic(path, (npy_header(array), memoryview(array.reshape(-1).view(np.uint8))))


def npy_header(array: Any) -> bytes:
    """numpy's .npy header for ``array`` (C order): version 1.0, or 2.0 when it is longer than 64 KiB (a
    structured dtype of many fields)."""
    # lazy: per command; vkcap --help imports this module, not numpy.lib.format
    from numpy.lib import format as npy

    info = npy.header_data_from_array_1_0(array)
    for write in (npy.write_array_header_1_0, npy.write_array_header_2_0):
        header = io.BytesIO()
        try:
            write(header, info)
            return header.getvalue()
        except ValueError:
            continue
    raise ValueError("no .npy header version holds this array's dtype")


def _check_export_request(trace: Any, seq: int, uid: str) -> None:
    """Refuse a ``--resource`` the trace has no snapshots of, then a ``--frame`` it does not hold
    (``TRACE: FLAG: why``, exit 2)."""
    known = set(trace.resources) | {u for f in trace.frames for u in f.snapshots}
    if uid not in known:
        raise TraceError(f"'{uid}' is not a resource of this trace (its resources: {', '.join(sorted(known)) or 'none'})",
                         file=trace.path, place="--resource")
    try:
        trace.frame(seq)
    except TraceError as exc:
        exc.place = "--frame"
        exc.args = (exc.render(),)
        raise




def _check_export_meta(trace: Path, uid: str, meta: dict[str, Any]) -> None:
    """Refuse a resource whose description in the trace cannot describe its snapshot: the fields the
    exported file is shaped by (a tensor's or image's format, dims and texel size), each of its type,
    in range and consistent with the resource's size (``TRACE: resources.UID.FIELD: why``, exit 2)."""
    # lazy: per command; vkcap --help imports this module, not vkcore.resources.formats (with vulkan)
    from vkcore.resources.formats import format_info, tensor_dtype

    kind = meta.get("kind", "buffer")
    if kind == "buffer":
        return

    def refuse(field: str, why: str) -> None:
        raise TraceError(f"{why}: the trace's description of resource '{uid}' is malformed", file=trace,
                         place=f"resources.{uid}.{field}")

    size, fmt, dims = meta.get("size"), meta.get("format"), meta.get("dims")
    if not (isinstance(size, int) and not isinstance(size, bool) and size >= 0):
        refuse("size", "not a byte count")
    if not isinstance(fmt, str):
        refuse("format", "not a format name")
    try:
        info = format_info(fmt)
        itemsize = int(np_dtype(tensor_dtype(fmt)).itemsize) if kind == "tensor" else 0
    except KeyError:
        refuse("format", f"not a {kind} format")
    wanted = 1 if kind == "tensor" else 3  # an image's dims are [depth or layers, width, height, ...]
    if not (isinstance(dims, list) and len(dims) >= wanted and
            all(isinstance(d, int) and not isinstance(d, bool) and 1 <= d <= size for d in dims)):
        refuse("dims", "not a list of sizes")
    if kind == "tensor":
        if math.prod(dims) * itemsize != size:
            refuse("dims", f"{dims} of {itemsize}-byte elements is not its {size} bytes")
        return
    texel = meta.get("texel_bytes", info.block_bytes)
    if not (isinstance(texel, int) and not isinstance(texel, bool) and 1 <= texel <= 64):
        refuse("texel_bytes", "not a texel size")
    if dims[1] * dims[2] * texel > size:
        refuse("dims", f"a {dims[1]}x{dims[2]} level 0 of {texel}-byte texels does not fit its {size} bytes")


def np_dtype(descr: str) -> Any:
    # lazy: per command; vkcap --help imports this module, not numpy
    import numpy as np

    return np.dtype(descr)


def _check_export_suffix(path: Path, kind: str) -> None:
    """Refuse an ``-o`` whose suffix a snapshot of ``kind`` does not export as."""
    wanted = EXPORT_SUFFIXES.get(kind)
    if wanted is None:
        raise UsageError(f"exporting a {kind} is not supported yet", file=path, place="-o")
    if path.suffix.lower() not in wanted:
        article = "an" if kind[:1] in ("a", "e", "i", "o", "u") else "a"
        choices = f"{', '.join(wanted[:-1])} or {wanted[-1]}" if len(wanted) > 1 else wanted[0]
        raise UsageError(f"{article} {kind} exports as {choices}", file=path, place="-o")
