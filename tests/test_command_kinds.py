"""Command kinds: one module each, registered once; the planner asks them, not the command types."""
from __future__ import annotations

import subprocess
import sys

import numpy as np

from tests.builders import ADD_FLOAT, REPO, ScenarioBuilder
from vkcore.commands import KINDS, by_kind, kind_of
from vkcore.exec.plan import make_plan, unwritable_resources, written_resources
from vkcore.scenario.model import COMMAND_KINDS
from vkcore.scenario.load import load_scenario


def test_every_command_of_the_format_has_exactly_one_kind() -> None:
    assert set(KINDS) == set(COMMAND_KINDS.values())
    assert all(kind.command_type is command_type for command_type, kind in KINDS.items())
    assert [t.KIND for t, k in KINDS.items() if k.dispatch] == ["dispatch_compute", "dispatch_fragment", "dispatch_graph",
                                                               "dispatch_spirv_graph", "dispatch_optical_flow"]
    assert [t.KIND for t, k in KINDS.items() if k.boundary] == ["mark_boundary"]


def test_frames_bindings_and_writes_come_from_the_kinds(builder: ScenarioBuilder) -> None:
    builder.shader("add", ADD_FLOAT)
    for uid in "abc":
        builder.buffer(uid, 16, np.zeros(4, np.float32), shader_access="readonly" if uid != "c" else "readwrite")
    builder.resources.append({"memory_barrier": {"uid": "mb", "src_access": "compute_shader_write",
                                                 "dst_access": "compute_shader_read"}})
    builder.dispatch("add", [(0, 0, "a"), (0, 1, "b"), (0, 2, "c")], [4, 1, 1]).barrier(memory_barrier_refs=["mb"])
    builder.boundary(["c"], 0).dispatch("add", [(0, 0, "c"), (0, 1, "b"), (0, 2, "a")], [4, 1, 1])
    scenario = load_scenario(builder.save())
    assert [(k.command_type.KIND, [c.index for c in cmds]) for k, cmds in by_kind(scenario.commands)] == [
        ("dispatch_compute", [0, 3]), ("dispatch_barrier", [1]), ("mark_boundary", [2])]
    plan = make_plan(scenario)
    assert [[c.index for c in f.commands] for f in plan.frames] == [[0, 1], [3]]
    assert [[c.index for c in f.dispatches] for f in plan.frames] == [[0], [3]] and plan.dispatch_count == 2
    assert written_resources(scenario) == ("c",)  # bound, and not declared readonly
    # SPIR-V says binding 0 and 1 are read-only: the second dispatch writes 'a' (binding 2), the first 'c'
    read_only = {"add": {(0, 0), (0, 1)}}
    assert unwritable_resources(scenario, read_only) == frozenset({"b"})
    assert kind_of(scenario.commands[0]).declared_writes(scenario, scenario.commands[0]) == ["c"]


LAZY_KINDS = ("vkcore.commands.fragment", "vkcore.commands.graph", "vkcore.commands.spirv_graph",
              "vkcore.commands.optical_flow")


def test_kinds_with_layers_of_their_own_are_imported_by_the_scenarios_that_use_them(builder: ScenarioBuilder) -> None:
    """A fresh interpreter that loads everything a compute scenario's replay and recording need, and
    looks up the kinds of its commands, has imported no graphics, graph or optical-flow kind (nor the
    graph layer); looking up a fragment pass's kind imports that one, and only it."""
    builder.shader("add", ADD_FLOAT)
    for uid in "abc":
        builder.buffer(uid, 16, np.zeros(4, np.float32))
    builder.dispatch("add", [(0, 0, "a"), (0, 1, "b"), (0, 2, "c")], [4, 1, 1]).boundary(["c"], 0)
    probe = f"""
import sys
import capture.recorder, replay.replayer, vkcap.cli
from vkcore.commands import kind_of
from vkcore.scenario.model import DispatchFragment
from vkcore.scenario.load import load_scenario
scenario = load_scenario({str(builder.save())!r})
assert [kind_of(c).command_type.KIND for c in scenario.commands] == ["dispatch_compute", "mark_boundary"]
print(sorted(m for m in sys.modules if m in {LAZY_KINDS!r} or m.startswith("vkcore.graphs")))
kind_of(DispatchFragment.__new__(DispatchFragment))
print(sorted(m for m in sys.modules if m in {LAZY_KINDS!r}))
"""
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["[]", "['vkcore.commands.fragment']"]
