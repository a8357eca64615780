"""Buffer views (capture.views) derived from real SPIR-V and the scenario's dispatches, read back from JSON
with every field checked, and typed comparisons (replay.typed) that judge a struct field by field."""
from __future__ import annotations

import json
from pathlib import Path
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from capture.views import View, ViewError, derive_views
from replay.results import Tolerance
from replay.tolerances import TolerancePolicy
from replay.typed import compare_in_view
from tests.test_block_layout import compile_glsl

SHADER = """#version 450
layout(local_size_x = 1) in;
struct P { vec2 pos; int id; };
layout(std430, set = 0, binding = 0) buffer H { uint count; float scale; P items[]; } h;
layout(std430, set = 0, binding = 1) readonly buffer In { vec4 v[]; } inp;
layout(std140, set = 0, binding = 2) buffer Pd { float padded[]; } pd;
void main() { h.count = 1; h.items[0].pos = inp.v[0].xy; pd.padded[0] = 1.0; }
"""
READER = """#version 450
layout(local_size_x = 1) in;
layout(std430, set = 0, binding = 0) readonly buffer R { uint words[]; } r;
layout(std430, set = 0, binding = 1) buffer O { uint o[]; } o;
void main() { o.o[0] = r.words[0]; }
"""
ITEM = np.dtype({"names": ["pos", "id"], "formats": [("<f4", (2,)), "<i4"], "offsets": [0, 8], "itemsize": 16})


def document(*dispatches: tuple[str, list[str]]) -> dict:
    uids = sorted({u for _, refs in dispatches for u in refs})
    return {"resources": [{"buffer": {"uid": u}} for u in uids],
            "commands": [{"dispatch_compute": {"shader_ref": s, "bindings": [{"set": 0, "id": i, "resource_ref": u}
                                                                              for i, u in enumerate(refs)]}}
                         for s, refs in dispatches]}


@pytest.fixture(scope="module")
def spirv(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    return {uid: compile_glsl(source, tmp_path_factory.mktemp(uid)) for uid, source in (("s", SHADER), ("r", READER))}


def test_views_follow_the_last_writer_and_read_back_from_json(spirv: dict[str, bytes]) -> None:
    views = derive_views(document(("s", ["a", "b", "c"]), ("r", ["c", "d"])), spirv)
    a, b, c = views["a"], views["b"], views["c"]
    assert a.text == "struct{count: uint32, scale: float32, items: struct{pos: float32[2], id: int32}[]}"
    assert [(p.name, p.dtype, p.shape, p.base, p.stride, p.count) for p in a.parts] == [
        ("count", "uint32", (), 0, 4, 1), ("scale", "float32", (), 4, 4, 1),
        ("items.pos", "float32", (2,), 8, 16, None), ("items.id", "int32", (), 8, 16, None)]
    assert (b.text, b.role, b.scalar is not None) == ("float32[4][]", "reader", True)
    # c: written as std140 floats by 's', read as uint words by 'r': the writer's view, the other kept
    assert (c.text, c.shader, c.binding, c.role) == ("float32[]", "s", "0.2", "writer")
    assert [alt.text for alt in c.alternatives] == ["uint32[]"]
    assert views["d"].role == "writer" and views["d"].text == "uint32[]"
    for view in views.values():
        assert View.from_json(json.loads(json.dumps(view.to_json()))) == view
    assert derive_views({"commands": "nonsense", "resources": [5, {"buffer": 3}]}, spirv) == {}
    assert derive_views(document(("missing", ["a"])), spirv) == {}


def test_a_struct_is_judged_field_by_field(spirv: dict[str, bytes]) -> None:
    view = derive_views(document(("s", ["a", "b", "c"])), spirv)["a"]
    rng = np.random.default_rng(1)
    items = np.zeros(50, ITEM)
    items["pos"], items["id"] = rng.random((50, 2)), np.arange(50)
    header = np.array([50], np.uint32).tobytes() + np.array([2.0], np.float32).tobytes()
    moved = items.copy()
    moved["pos"][41, 1] = np.nextafter(moved["pos"][41, 1], np.float32(9), dtype=np.float32)  # 1 ULP
    moved["pos"][3, 0] = np.nextafter(np.nextafter(moved["pos"][3, 0], np.float32(9), dtype=np.float32), np.float32(9), dtype=np.float32)
    moved["id"][7] = 99
    c = compare_in_view("a", header + items.tobytes(), header + moved.tobytes(), view, TolerancePolicy(default=Tolerance(ulp=4)))
    assert (c.status, c.count, c.differing, c.beyond_tolerance, c.max_ulp) == ("DIVERGED", 2 + 50 * 3, 3, 1, 2)
    assert c.extras["first_where"] == "[7].items.id" and (c.first_recorded, c.first_live) == (7, 99)
    fields = {f["name"]: (f["status"], f["differing"], f["beyond_tolerance"], f["max_ulp"]) for f in c.extras["fields"]}
    assert fields == {"count": ("identical", 0, 0, 0), "scale": ("identical", 0, 0, 0),
                      "items.pos": ("within tolerance", 2, 0, 2), "items.id": ("DIVERGED", 1, 1, 0)}
    assert [e["where"] for e in c.top] == ["[7].items.id", "[3].items.pos[0]", "[41].items.pos[1]"]
    # a tolerance of the field over the resource's: ulp 1 for items.pos puts the 2-ULP value beyond it
    policy = TolerancePolicy(default=Tolerance(ulp=4), per_resource={"a.pos": {"ulp": 1}, "a.items.pos": {"ulp": 1}})
    c = compare_in_view("a", header + items.tobytes(), header + moved.tobytes(), view, policy)
    assert {f["name"]: f["beyond_tolerance"] for f in c.extras["fields"]}["items.pos"] == 1


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(
                        ["parts", "dtype", "shape", "offsets", "base", "stride", "count", "text", "name", "alternatives"]), inner, max_size=6),
                    max_leaves=20))
def test_a_view_from_a_trace_is_checked_or_refused(obj: object) -> None:
    try:
        view = View.from_json(obj)
    except ViewError:
        return
    for part in view.parts:  # whatever was accepted is bounded and extracts without error
        assert part.extract(bytes(64)).shape[1:] == part.shape


def test_the_golden_traces_views() -> None:
    """Views derived from what old traces already hold (their SPIR-V and scenario), compute and fragment."""
    from capture.trace import Trace
    from replay.reading import trace_views

    repo = Path(__file__).resolve().parent.parent / "traces"
    seen = {}
    for name in ("add", "heat", "blur", "fragment", "conv2d"):
        with Trace.open(repo / f"{name}.vkt") as trace:
            seen.update({(name, uid): (v.text, v.shader, v.binding, v.role) for uid, v in trace_views(trace).items()})
    assert seen == {
        ("add", "a"): ("float32[]", "add", "0.0", "reader"), ("add", "b"): ("float32[]", "add", "0.1", "reader"),
        ("add", "out"): ("float32[]", "add", "0.2", "writer"), ("heat", "a"): ("float32[]", "step", "0.1", "writer"),
        ("heat", "b"): ("float32[]", "step", "0.1", "writer"), ("blur", "pixels"): ("float32[4][]", "blur", "0.1", "writer"),
        ("fragment", "pixels"): ("float32[4][]", "fs", "0.0", "writer")}  # conv2d: tensors keep their formats
