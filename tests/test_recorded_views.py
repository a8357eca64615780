"""The views a trace records (META kind ``views``), what info says of them and the typed .npy files export
writes from them.

- A recording of each example holds a ``views`` record, right after ``resources``, whose views are the
  ones derived from its SPIR-V, and the same views the golden traces (recorded before the record
  existed) give by derivation.
- A malformed view in the record (generated: every field of a view made hostile) is a damaged record that
  info lists, and only that buffer's view is derived; a whole record of the wrong shape is derived
  entirely; a well-formed forged view is what readers use (the record is authoritative). trim keeps it.
- info shows each buffer's view (``out: float32[4096] (shader 'add', binding 0.2)``) in text and JSON;
  export writes float32 (n,), vec4 (n, 4), a struct's structured dtype (its payload the snapshot's bytes),
  a header+array block's runtime array with a line naming the header's values, a fixed array's values, and
  --raw the flat int8 file; a view that cannot shape an array is one line exit 2 and nothing is written.
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from capture.format import kinds
from capture.reader import TraceReader
from capture.writer import TraceWriter
from capture.trace import Trace
from capture.views import View
from replay.reading import _derived_views, trace_views
from tests.builders import ScenarioBuilder, vkcap

REPO = Path(__file__).resolve().parent.parent
GOLDEN_TEXTS = {
    "add": {"a": "float32[]", "b": "float32[]", "out": "float32[]"},
    "heat": {"a": "float32[]", "b": "float32[]"},
    "blur": {"pixels": "float32[4][]"},
    "fragment": {"pixels": "float32[4][]"},
}


def record(scenario: Path, trace: Path) -> Path:
    """``scenario`` recorded into ``trace``, its outputs beside the trace (never into the examples)."""
    done = vkcap("record", scenario, "-o", trace, "--output", trace.parent)
    assert done.returncode == 0, done.stderr
    return trace


def rewrite(src: Path, dst: Path, views_body: Any = None, drop: bool = False) -> Path:
    """``src`` copied record by record (blobs as stored), its ``views`` record's body replaced by
    ``views_body`` (or left out with ``drop``)."""
    with TraceReader(src) as reader, TraceWriter(dst, level=1, threads=0) as writer:
        for key in reader.blob_keys():
            if not writer.has_blob(key):
                writer.write_prepared(reader.read_prepared(key))
        for offset, kind in reader.meta_index():
            body = reader.read_meta(offset)
            body.pop("kind", None)
            if kind == kinds.VIEWS:
                if drop:
                    continue
                body = {"views": views_body}
            writer.add_meta(kind, body)
    return dst


def snapshot_folder(folder: Path) -> dict[str, tuple[int, int, str]]:
    return {e.name: (e.stat().st_size, e.stat().st_mtime_ns, hashlib.sha256(Path(e.path).read_bytes()).hexdigest())
            for e in os.scandir(folder) if e.is_file()}


@pytest.fixture(scope="module")
def add_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record(REPO / "examples" / "add" / "scenario.json", tmp_path_factory.mktemp("add") / "add.vkt")


# -- the record ----------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("name", sorted(GOLDEN_TEXTS))
def test_a_recording_holds_the_views_derivation_gives(name: str, tmp_path: Path) -> None:
    trace_path = record(REPO / "examples" / name / "scenario.json", tmp_path / f"{name}.vkt")
    with TraceReader(trace_path) as reader:
        order = [kind for _, kind in reader.meta_index()]
    assert order.count(kinds.VIEWS) == 1 and order[order.index(kinds.RESOURCES) + 1] == kinds.VIEWS
    # the golden trace as a recording made before the record existed: derived, to the same views
    older = rewrite(REPO / "traces" / f"{name}.vkt", tmp_path / "older.vkt", drop=True)
    with Trace.open(trace_path) as trace, Trace.open(older) as golden:
        assert trace.views is not None and not trace.damaged
        assert {uid: v.text for uid, v in trace.views.items()} == GOLDEN_TEXTS[name]
        assert trace.views == _derived_views(trace) == trace_views(trace)
        assert golden.views is None
        assert {u: v.to_json() for u, v in trace_views(golden).items()} == {u: v.to_json() for u, v in trace.views.items()}


def hostile_values() -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(allow_nan=True),
                     st.text(max_size=8), st.binary(max_size=8), st.lists(st.integers(-3, 3), max_size=3),
                     st.dictionaries(st.text(max_size=3), st.integers(-9, 9), max_size=2))


@st.composite
def malformed_views(draw: st.DrawFn) -> Any:
    """A view of float32[] with one field (of the view or of its part) made hostile, or no table at all."""
    good = View.from_json(json.loads(json.dumps(ADD_OUT_VIEW)))
    obj = copy.deepcopy(good.to_json())
    where = draw(st.sampled_from(["view", "text", "parts", "alternatives", "part", "dtype", "shape", "offsets",
                                  "base", "stride", "count", "name"]))
    value = draw(hostile_values())
    if where == "view":
        return value if not isinstance(value, dict) else []
    if where in ("text", "parts", "alternatives"):
        obj[where] = value
    elif where == "part":
        obj["parts"][0] = value
    else:
        obj["parts"][0][where] = value
    try:
        View.from_json(obj)
    except ValueError:
        return obj
    return {"parts": []}  # the value happened to be valid: a view without parts is not


ADD_OUT_VIEW = {"text": "float32[]", "shader": "add", "binding": "0.2", "role": "writer",
                "parts": [{"name": "result", "dtype": "float32", "shape": [], "offsets": [0], "base": 0, "stride": 4,
                           "count": None}]}


@pytest.mark.slow
@pytest.mark.device
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bad=malformed_views())
def test_a_malformed_view_is_a_damaged_record_and_that_buffer_is_derived(add_trace: Path, tmp_path: Path, bad: Any) -> None:
    with Trace.open(add_trace) as good:
        recorded = {uid: v.to_json() for uid, v in good.views.items()}  # type: ignore[union-attr]
        derived = _derived_views(good)
    forged = rewrite(add_trace, tmp_path / "forged.vkt", {**recorded, "a": {**recorded["a"], "shader": "kept"}, "out": bad})
    with Trace.open(forged) as trace:
        assert [(d.kind, d.reason.startswith("the view of 'out' is malformed")) for d in trace.damaged] == [(kinds.VIEWS, True)]
        assert trace.views_malformed == {"out"}
        views = trace_views(trace)
        assert views["out"] == derived["out"]  # derived from the SPIR-V
        assert views["a"].shader == "kept"  # the other recorded views kept


@pytest.mark.device
def test_a_record_of_the_wrong_shape_is_derived_whole(add_trace: Path, tmp_path: Path) -> None:
    with Trace.open(add_trace) as good:
        derived = _derived_views(good)
    for body in (5, ["out"], None, b"out"):
        with Trace.open(rewrite(add_trace, tmp_path / "forged.vkt", body)) as trace:
            assert [(d.kind, d.reason) for d in trace.damaged] == [(kinds.VIEWS, "malformed content")]
            assert trace.views is None and trace_views(trace) == derived


@pytest.mark.device
def test_info_lists_a_malformed_view_and_shows_the_derived_one(add_trace: Path, tmp_path: Path) -> None:
    hostile = "\x1b[31m[red]x\n"
    with Trace.open(add_trace) as good:
        recorded = {uid: v.to_json() for uid, v in good.views.items()}  # type: ignore[union-attr]
    forged = rewrite(add_trace, tmp_path / "forged.vkt", {**recorded, "out": {"parts": "no"},
                                                         "b": {**recorded["b"], "shader": hostile}})
    done = vkcap("info", forged)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    damaged = [line for line in lines if line.startswith("damaged")]
    assert len(damaged) == 1 and "(views): the view of 'out' is malformed (a view needs 1 to 4096 parts)" in damaged[0]
    assert "view       out: float32[4096] (shader 'add', binding 0.2)" in lines
    assert "view       b: float32[4096] (shader '\\x1b[31m[red]x\\x0a', binding 0.1)" in lines
    assert "\x1b" not in done.stdout
    summary = json.loads(vkcap("info", "--json", forged).stdout)
    assert summary["intact"] is False and summary["views"]["b"]["shader"] == hostile


@pytest.mark.device
def test_a_forged_well_formed_view_is_what_readers_use(add_trace: Path, tmp_path: Path) -> None:
    with Trace.open(add_trace) as good:
        recorded = {uid: v.to_json() for uid, v in good.views.items()}  # type: ignore[union-attr]
        raw = bytes(good.snapshot(0, "out"))
    as_int = {**ADD_OUT_VIEW, "text": "int32[]", "parts": [{**ADD_OUT_VIEW["parts"][0], "dtype": "int32"}]}
    forged = rewrite(add_trace, tmp_path / "forged.vkt", {**recorded, "out": as_int})
    assert "view       out: int32[4096] (shader 'add', binding 0.2)" in vkcap("info", forged).stdout.splitlines()
    assert vkcap("export", forged, "--frame", "0", "--resource", "out", "-o", tmp_path / "out.npy").returncode == 0
    exported = np.load(tmp_path / "out.npy")
    assert exported.dtype == np.dtype("<i4") and np.array_equal(exported, np.frombuffer(raw, "<i4"))
    # an empty record: no buffer has a view, and nothing is derived
    with Trace.open(rewrite(add_trace, tmp_path / "empty.vkt", {})) as trace:
        assert trace_views(trace) == {} and not trace.damaged


@pytest.mark.device
def test_trim_keeps_the_views_record(add_trace: Path, tmp_path: Path) -> None:
    done = vkcap("trim", add_trace, "--frames", "1-2", "-o", tmp_path / "t.vkt")
    assert done.returncode == 0, done.stderr
    with Trace.open(add_trace) as whole, Trace.open(tmp_path / "t.vkt") as part:
        assert part.views is not None and part.views == whole.views


@pytest.mark.device
def test_a_trace_without_the_record_derives_its_views(add_trace: Path, tmp_path: Path) -> None:
    with Trace.open(add_trace) as good, Trace.open(rewrite(add_trace, tmp_path / "old.vkt", drop=True)) as old:
        assert old.views is None and not old.damaged and trace_views(old) == good.views


# -- info and export -----------------------------------------------------------------------------------


@pytest.mark.device
def test_info_shows_each_buffers_view_in_text_and_json(add_trace: Path) -> None:
    done = vkcap("info", add_trace)
    assert done.returncode == 0
    assert [line for line in done.stdout.splitlines() if line.startswith("view")] == [
        "view       a: float32[4096] (shader 'add', binding 0.0)", "view       b: float32[4096] (shader 'add', binding 0.1)",
        "view       out: float32[4096] (shader 'add', binding 0.2)"]
    summary = json.loads(vkcap("info", "--json", add_trace).stdout)
    out = summary["resources"]["out"]["view"]
    assert out == summary["views"]["out"]
    assert {k: out[k] for k in ("text", "type", "elements", "shader", "binding", "role")} == {
        "text": "float32[4096]", "type": "float32[]", "elements": 4096, "shader": "add", "binding": "0.2", "role": "writer"}
    assert out["parts"] == ADD_OUT_VIEW["parts"] and out["alternatives"] == []


@pytest.mark.device
def test_export_writes_float32_and_raw_keeps_int8(add_trace: Path, tmp_path: Path) -> None:
    with Trace.open(add_trace) as trace:
        raw = bytes(trace.snapshot(2, "out"))
    assert vkcap("export", add_trace, "--frame", "2", "--resource", "out", "-o", tmp_path / "t.npy").returncode == 0
    assert vkcap("export", add_trace, "--frame", "2", "--resource", "out", "-o", tmp_path / "r.npy", "--raw").returncode == 0
    typed, flat = np.load(tmp_path / "t.npy"), np.load(tmp_path / "r.npy")
    assert typed.dtype == np.dtype("<f4") and typed.shape == (4096,) and np.array_equal(typed, np.frombuffer(raw, "<f4"))
    assert flat.dtype == np.int8 and flat.tobytes() == raw


@pytest.mark.slow
@pytest.mark.device
def test_export_writes_a_vec4_buffer_as_n_by_4(tmp_path: Path) -> None:
    trace = record(REPO / "examples" / "blur" / "scenario.json", tmp_path / "blur.vkt")
    with Trace.open(trace) as t:
        raw = bytes(t.snapshot(0, "pixels"))
    assert vkcap("export", trace, "--frame", "0", "--resource", "pixels", "-o", tmp_path / "p.npy").returncode == 0
    pixels = np.load(tmp_path / "p.npy")
    assert pixels.dtype == np.dtype("<f4") and pixels.shape == (len(raw) // 16, 4)
    assert np.array_equal(pixels, np.frombuffer(raw, "<f4").reshape(-1, 4))


BLOCKS = """#version 450
layout(local_size_x = 1) in;
struct P { vec2 pos; int id; };
layout(std430, set = 0, binding = 0) buffer H { uint count; float scale; P items[]; } h;
layout(std430, set = 0, binding = 1) buffer S { P parts[]; } s;
layout(std140, set = 0, binding = 2) buffer Pd { float padded[]; } pd;
layout(std430, set = 0, binding = 3) buffer F { float data[8]; } f;
layout(std430, set = 0, binding = 4) buffer M { mat3 m; uvec2 tag; } mm;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i == 0) { h.count = 17u; h.scale = 1.5; mm.m = mat3(1, 2, 3, 4, 5, 6, 7, 8, 9); mm.tag = uvec2(7u, 9u); }
    h.items[i].pos = vec2(float(i), -float(i)); h.items[i].id = int(i) * 3;
    s.parts[i].pos = vec2(0.5 * float(i), 2.0); s.parts[i].id = -int(i);
    pd.padded[i] = float(i) + 0.25;
    if (i < 8u) { f.data[i] = float(i) * 10.0; }
}
"""
ITEM = np.dtype({"names": ["pos", "id"], "formats": [("<f4", (2,)), "<i4"], "offsets": [0, 8], "itemsize": 16})
N = 16


@pytest.fixture(scope="module")
def blocks_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("blocks")
    b = ScenarioBuilder(root / "scenario")
    b.shader("blocks", BLOCKS)
    sizes = {"h": 16 + 16 * N, "s": 16 * N, "pd": 16 * N, "f": 32, "mm": 56}
    for uid, size in sizes.items():
        b.buffer(uid, size)
    b.dispatch("blocks", [(0, i, uid) for i, uid in enumerate(sizes)], [N, 1, 1])
    b.boundary(list(sizes), 0)
    return record(b.save(), root / "blocks.vkt")


def export(trace: Path, uid: str, out: Path, *extra: str) -> tuple[np.ndarray, bytes, str]:
    done = vkcap("export", trace, "--frame", "0", "--resource", uid, "-o", out, *extra)
    assert done.returncode == 0, done.stderr
    with Trace.open(trace) as t:
        return np.load(out), bytes(t.snapshot(0, uid)), done.stdout


@pytest.mark.slow
@pytest.mark.device
def test_export_struct_views(blocks_trace: Path, tmp_path: Path) -> None:
    parts, raw, said = export(blocks_trace, "s", tmp_path / "s.npy")
    assert parts.dtype == ITEM and parts.shape == (N,) and said == ""
    assert parts.tobytes() == raw  # laid out as the shader lays it out: the file's data is the snapshot
    assert np.array_equal(parts["pos"], np.stack([0.5 * np.arange(N), np.full(N, 2.0)], 1).astype(np.float32))
    assert np.array_equal(parts["id"], -np.arange(N, dtype=np.int32))

    items, raw, said = export(blocks_trace, "h", tmp_path / "h.npy")  # header + runtime array: the array
    assert items.dtype == ITEM and items.tobytes() == raw[8:8 + 16 * N]  # std430: items at 8 (vec2 alignment)
    assert np.array_equal(items["id"], 3 * np.arange(N, dtype=np.int32))
    assert said == f"h: the file holds its runtime array ({N} elements); not in it: count = 17 (uint32), scale = 1.5 (float32)\n"

    padded, raw, _ = export(blocks_trace, "pd", tmp_path / "pd.npy")  # std140: one float every 16 bytes
    assert padded.dtype == np.dtype("<f4") and np.array_equal(padded, np.frombuffer(raw, "<f4")[::4])
    assert np.array_equal(padded, np.arange(N, dtype=np.float32) + 0.25)

    data, raw, _ = export(blocks_trace, "f", tmp_path / "f.npy")  # a fixed array: its values
    assert data.shape == (8,) and np.array_equal(data, 10 * np.arange(8, dtype=np.float32))

    block, raw, _ = export(blocks_trace, "mm", tmp_path / "mm.npy")  # fixed members: one structured element
    assert block.shape == (1,) and block.dtype.itemsize == 56 and block.tobytes() == raw
    assert np.array_equal(block["m"]["v"][0], np.arange(1, 10, dtype=np.float32).reshape(3, 3))  # columns, padded
    assert np.array_equal(block["tag"][0], [7, 9])

    flat, raw, _ = export(blocks_trace, "h", tmp_path / "raw.npy", "--raw")
    assert flat.dtype == np.int8 and flat.tobytes() == raw


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("view, why", [
    ({"text": "x", "parts": [{"name": "a", "dtype": "float32", "shape": [], "offsets": [0], "base": 0, "stride": 8, "count": None},
                             {"name": "a", "dtype": "float32", "shape": [], "offsets": [4], "base": 0, "stride": 8, "count": None}]},
     "its fields' names are empty or repeated"),
    ({"text": "x", "parts": [{"name": "a", "dtype": "float32", "shape": [3], "offsets": [8, 0, 4], "base": 0, "stride": 16, "count": None},
                             {"name": "b", "dtype": "float32", "shape": [], "offsets": [12], "base": 0, "stride": 16, "count": None}]},
     "field 'a': its offsets are no regular layout"),
    ({"text": "x", "parts": [{"name": "a", "dtype": "float32", "shape": [], "offsets": [0], "base": 0, "stride": 4, "count": 9999}]},
     "the snapshot's 16384 bytes hold fewer than the view's 9999 elements"),
])
def test_a_view_that_cannot_shape_an_array_is_one_line(add_trace: Path, tmp_path: Path, view: dict[str, Any], why: str) -> None:
    with Trace.open(add_trace) as good:
        recorded = {uid: v.to_json() for uid, v in good.views.items()}  # type: ignore[union-attr]
    forged = rewrite(add_trace, tmp_path / "forged.vkt", {**recorded, "out": view})
    before = snapshot_folder(tmp_path)
    done = vkcap("export", forged, "--frame", "0", "--resource", "out", "-o", tmp_path / "out.npy")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"vkcap: error: {forged}: views.out: the view of 'out' cannot shape an array: {why} (--raw exports its bytes)\n"
    assert snapshot_folder(tmp_path) == before
    assert vkcap("export", forged, "--frame", "0", "--resource", "out", "-o", tmp_path / "out.npy", "--raw").returncode == 0


@st.composite
def bounded_views(draw: st.DrawFn) -> View:
    """Views as a stranger's trace may hold them, every one accepted by View.from_json: parts of any
    scalar type and shape, their values anywhere in the element (in any order, with gaps), fixed or
    repeated, at any base, with names that clash."""
    from capture.views import SCALARS

    def values(cursor: int, dtype: str, count: int) -> tuple[list[int], int]:
        offsets = []
        for _ in range(count):
            cursor += draw(st.integers(0, 3))
            offsets.append(cursor)
            cursor += SCALARS[dtype]
        return draw(st.permutations(offsets)), cursor

    parts, cursor = [], 0
    array_base = draw(st.integers(0, 80))
    for _ in range(draw(st.integers(1, 4))):
        dtype = draw(st.sampled_from(sorted(SCALARS)))
        shape = draw(st.lists(st.integers(1, 3), max_size=2))
        repeated = draw(st.booleans())
        offsets, end = values(cursor if repeated else 0, dtype, int(np.prod(shape)) if shape else 1)
        if repeated:
            cursor = end
        parts.append({"name": draw(st.one_of(st.sampled_from(["", "a", "b", "x.a", "x.b", "\x1b[m"]), st.text(max_size=4))),
                      "dtype": dtype, "shape": shape,
                      "offsets": offsets, "base": array_base if repeated else draw(st.integers(0, 80)),
                      "stride": end + draw(st.integers(0, 8)), "count": None if repeated else draw(st.integers(0, 5))})
    stride = cursor + draw(st.integers(0, 8))
    for part in parts:
        if part["count"] is None:
            part["stride"] = stride
    return View.from_json({"text": draw(st.sampled_from(["float32[]", "struct{a: int8}", "x[]y[]", ""])), "parts": parts})


@pytest.mark.slow
@pytest.mark.device
@settings(max_examples=300, deadline=None)
@given(view=bounded_views(), data=st.binary(max_size=300))
def test_any_accepted_view_exports_exactly_or_says_why(view: View, data: bytes) -> None:
    """In-process: every view View.from_json accepts gives an array whose values are the view's, or a
    ViewExportError, and the .npy file of that array reads back as it (field names of any text); info's
    summary of it never fails."""
    import io

    from capture.view_arrays import ViewExportError, npy_problem, typed_array
    from vkcap.commands_inspect import npy_header, view_line, view_summary

    assert view_line("u", view_summary(view, len(data)))
    try:
        array, header = typed_array(view, data)
    except ViewExportError:
        return
    if npy_problem(array) is not None:  # export says so (test_a_struct_array_view_export_says_why)
        with pytest.raises(ValueError):
            npy_header(array)
        return
    payload = np.asarray(array).reshape(-1).view(np.uint8).tobytes()  # as write_npy writes it
    back = np.load(io.BytesIO(npy_header(array) + payload))
    assert back.dtype == array.dtype and back.shape == array.shape
    if array.dtype.names is None:  # a structured array read back from memory is copied, its padding bytes not
        assert back.tobytes() == payload
    arrays = [p for p in view.parts if p.count is None]
    if len(arrays) == 1:
        assert array.dtype == np.dtype(arrays[0].dtype).newbyteorder("<") and np.array_equal(array, arrays[0].extract(data), equal_nan=array.dtype.kind == "f")
        assert len(header) == len(view.parts) - 1
    elif arrays:  # a structured array: each field holds the part's values, the bytes are the snapshot's
        n, base, stride = len(array), arrays[0].base, arrays[0].stride
        assert array.dtype.itemsize == stride and array.tobytes() == data[base: base + n * stride]
        assert n == arrays[0].elements(len(data))


@pytest.mark.device
def test_info_shows_struct_views_with_their_counts(blocks_trace: Path) -> None:
    done = vkcap("info", blocks_trace)
    assert done.returncode == 0
    assert [line for line in done.stdout.splitlines() if line.startswith("view")] == [
        "view       f: struct{data: float32[8]} (shader 'blocks', binding 0.3)",
        f"view       h: struct{{count: uint32, scale: float32, items: struct{{pos: float32[2], id: int32}}[{N}]}} (shader 'blocks', binding 0.0)",
        "view       mm: struct{m: float32[3x3], tag: uint32[2]} (shader 'blocks', binding 0.4)",
        f"view       pd: float32[{N}] (shader 'blocks', binding 0.2)",
        f"view       s: struct{{pos: float32[2], id: int32}}[{N}] (shader 'blocks', binding 0.1)"]


@pytest.mark.parametrize("parts, why", [
    ([{"name": "a", "dtype": "float32", "shape": [4096], "offsets": [0] * 4096, "base": 0, "stride": 4, "count": None}],
     "two of its values overlap"),  # 4096 values read from each 4-byte element: 4096 times the snapshot
    ([{"name": "a", "dtype": "float32", "shape": [], "offsets": [0], "base": 0, "stride": 8, "count": None},
      {"name": "b", "dtype": "float32", "shape": [], "offsets": [2], "base": 0, "stride": 8, "count": None}],
     "two of its values overlap"),
    ([{"name": "a", "dtype": "float32", "shape": [], "offsets": [0], "base": 0, "stride": 8, "count": None},
      {"name": "b", "dtype": "float32", "shape": [], "offsets": [4], "base": 0, "stride": 16, "count": None}],
     "the runtime array's parts have different bases or strides"),
    ([{"name": "a", "dtype": "float64", "shape": [], "offsets": [0], "base": 0, "stride": 8, "count": 1 << 24}],
     "its fixed parts hold more than 67108864 bytes"),
])
def test_a_view_whose_values_overlap_is_refused(parts: list[dict[str, Any]], why: str) -> None:
    """What a view reads out of a snapshot of N bytes is at most N + 64 MiB: overlapping values, which no
    block has, are refused when the view is read from a trace."""
    from capture.views import ViewError

    with pytest.raises(ViewError) as refused:
        View.from_json({"text": "x", "parts": parts})
    assert str(refused.value) == why


@settings(max_examples=100, deadline=None)
@given(view=bounded_views(), nbytes=st.integers(0, 400))
def test_an_accepted_view_reads_at_most_the_snapshot_plus_its_fixed_parts(view: View, nbytes: int) -> None:
    read = sum(p.extract(bytes(nbytes)).nbytes for p in view.parts)
    fixed = sum(p.count * len(p.offsets) * np.dtype(p.dtype).itemsize for p in view.parts if p.count is not None)
    assert read <= nbytes + fixed


@pytest.mark.slow
@pytest.mark.device
def test_replay_and_diff_read_the_record(add_trace: Path, tmp_path: Path) -> None:
    """replay compares in the recorded view (a forged int32[] is int32), and in the derived one where the
    recorded view is malformed, after one warning line; diff reads the damaged record's trace as well."""
    with Trace.open(add_trace) as good:
        recorded = {uid: v.to_json() for uid, v in good.views.items()}  # type: ignore[union-attr]
    as_int = {**ADD_OUT_VIEW, "text": "int32[]", "parts": [{**ADD_OUT_VIEW["parts"][0], "dtype": "int32"}]}
    for view, dtype in ((as_int, "int32"), ({"parts": "no"}, "float32")):
        forged = rewrite(add_trace, tmp_path / f"{dtype}.vkt", {**recorded, "out": view})
        done = vkcap("replay", forged, "--json", tmp_path / f"{dtype}.json")
        assert done.returncode == 0, done.stderr
        warnings = [line for line in done.stderr.splitlines() if "damaged" in line]
        assert warnings == ([] if dtype == "int32" else [
            f"vkcap: {forged}: damaged views record at offset {_views_offset(forged)} (before the first frame): the view of "
            "'out' is malformed (a view needs 1 to 4096 parts); derived from the SPIR-V instead; replaying the rest"])
        frames = json.loads((tmp_path / f"{dtype}.json").read_text())["frames"]
        assert {(c["uid"], c["dtype"]) for f in frames for c in f["resources"]} == {("out", dtype)}
    assert vkcap("diff", tmp_path / "float32.vkt", add_trace).returncode == 0


def _views_offset(trace: Path) -> int:
    with TraceReader(trace) as reader:
        return next(offset for offset, kind in reader.meta_index() if kind == kinds.VIEWS)


@pytest.mark.parametrize("source", ["BLOCKS", "PARTICLES"])
def test_real_layouts_read_back_and_export_every_field(source: str, tmp_path: Path) -> None:
    """Every block of test_block_layout's shaders (std140, std430, scalar, 8/16/64-bit, matrices row- and
    column-major, nested struct arrays): its view survives the trace (to_json, then from_json's checks)
    and exports with each field holding the part's values (padded subarrays unwrapped)."""
    from capture.view_arrays import npy_problem, typed_array
    from capture.views import view_of_block
    from tests import test_block_layout
    from vkcap.commands_inspect import _export_typed
    from vkcore.errors import TraceError
    from vkcore.shaders.block_layout import reflect_blocks

    views = [v for v in map(view_of_block, reflect_blocks(test_block_layout.compile_glsl(getattr(test_block_layout, source), tmp_path)))
             if v is not None]
    assert len(views) >= 3
    data = np.random.default_rng(1).integers(0, 256, 4096, np.uint8).tobytes()
    for view in views:
        assert View.from_json(json.loads(json.dumps(view.to_json()))) == view
        array, header = typed_array(view, data)
        tail = [p for p in view.parts if p.count is None]
        if len(tail) > 1:
            for name, part in zip(array.dtype.names, tail):
                values = array[name]
                while values.dtype.names == ("v",):
                    values = values["v"]
                assert np.array_equal(values, part.extract(data), equal_nan=True), (view.text, name)
        if npy_problem(array) is not None:  # a struct array's members overlap: export says so, writes nothing
            with pytest.raises(TraceError, match=r"cannot shape an array: its fields overlap .* \(--raw exports its bytes\)"):
                _export_typed(tmp_path / "t.vkt", tmp_path / "out.npy", "particles", view, data)
            assert not (tmp_path / "out.npy").exists()


@pytest.mark.device
def test_a_long_uid_or_type_name_is_cut_short_in_the_damage_line(add_trace: Path, tmp_path: Path) -> None:
    with Trace.open(add_trace) as good:
        recorded = {uid: v.to_json() for uid, v in good.views.items()}  # type: ignore[union-attr]
    bad = {**ADD_OUT_VIEW, "parts": [{**ADD_OUT_VIEW["parts"][0], "dtype": "f" * 1_000_000}]}
    with Trace.open(rewrite(add_trace, tmp_path / "long.vkt", {**recorded, "u" * 1_000_000: bad})) as trace:
        (damage,) = trace.damaged
        assert damage.reason == (f"the view of '{'u' * 64}...' is malformed (part 0: dtype '{'f' * 39}... (1000002 characters) "
                                 "is not one of int8, uint8, int16, uint16, int32, uint32, int64, uint64, float16, float32, "
                                 "float64); derived from the SPIR-V instead")
