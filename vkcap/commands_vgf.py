"""``vkcap vgf FILE [--json]``: what a VGF file holds, before a scenario runs it.

Modules (type, name, entry point, code kind and size, or placeholder), segments in execution order (module,
dispatch shape, descriptor sets and their bindings, push-constant ranges, constants with their graph
constant ids), the model resource table (category, format, shape, strides, alias group), the constants, and
the model's inputs and outputs: the binding ids a scenario's ``dispatch_graph`` binds. A rich tree on a
terminal, or JSON with ``--json``. A file that is not a readable VGF is one error line, exit code 2.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable

from vkcore.safe_text import shown

AddFlags = Callable[[argparse.ArgumentParser], None]


def register(sub: Any, add_common: AddFlags) -> None:
    """Add the ``vgf`` subcommand to the ``vkcap`` parser."""
    p = sub.add_parser("vgf", help="show what a VGF file holds: modules, segments, resources, constants")
    p.add_argument("file", type=Path, metavar="FILE", help="a .vgf file (ARM model-converter output)")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_common(p)
    p.set_defaults(handler=cmd_vgf)


def cmd_vgf(args: argparse.Namespace) -> int:
    # lazy: per command; vkcap --help imports this module, not vkcore.graphs.vgf (with flatbuffers, numpy, vulkan)
    from vkcore.graphs.vgf import read_vgf

    vgf = read_vgf(args.file)
    if args.json:
        print(json.dumps(vgf.to_dict(), indent=2))
        return 0
    # lazy: per command; vkcap --help imports this module, not rich.console
    from rich.console import Console

    Console(emoji=False).print(vgf_tree(vgf))
    return 0


def _short(name: str | None, prefix: str) -> str | None:
    return name[len(prefix):] if name and name.startswith(prefix) else name


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024  # type: ignore[assignment]
        if n < 1024:
            return f"{n:.1f} {unit}"
    return f"{n:.1f} TiB"


def vgf_tree(vgf: Any) -> Any:
    """A ``rich.tree.Tree`` of a :class:`vkcore.graphs.vgf.VgfFile`."""
    # lazy: per command; vkcap --help imports this module, not rich.markup, rich.tree
    from rich.markup import escape
    from rich.tree import Tree

    # lazy: per command; vkcap --help imports this module, not vkcore.graphs.vgf (with flatbuffers, numpy, vulkan)
    from vkcore.graphs.vgf import (
        BORDER_COLORS, SAMPLER_ADDRESS_MODES, SAMPLER_FILTERS, CodeKind, descriptor_type_name, stage_flags_name,
    )

    def q(text: object) -> str:
        return escape(shown(text))

    def dtype(value: int | None) -> str:
        return q(_short(descriptor_type_name(value), "VK_DESCRIPTOR_TYPE_") or "none")

    def fmt(r: Any) -> str:
        return q(_short(r.format_name, "VK_FORMAT_") or f"VkFormat {r.format}")

    def res(index: int) -> str:
        r = vgf.resources[index]
        return f"resource {index} ({r.category.name.lower()} {fmt(r)} {q(list(r.shape))})"

    where = q(vgf.path) if vgf.path is not None else "VGF"
    root = Tree(f"[bold]{where}[/bold]  VGF {vgf.version}, {_size(vgf.file_size)}, "
                f"Vulkan headers {vgf.vk_header_version or 'unknown'}")

    mods = root.add(f"[bold]modules[/bold] ({len(vgf.modules)})")
    for m in vgf.modules:
        if m.code_kind is CodeKind.PLACEHOLDER:
            code = "[yellow]placeholder[/yellow] (substituted by the scenario)"
        else:
            code = f"{m.code_kind.value}, {_size(m.code_size)}"
        mods.add(f"{q(f'[{m.index}]')} [cyan]{m.type.name}[/cyan] {q(m.name)}  entry {q(m.entry_point)}  {code}")

    segs = root.add(f"[bold]segments[/bold] ({len(vgf.segments)}, in execution order)")
    for s in vgf.segments:
        mod = vgf.modules[s.module_index]
        line = f"{q(f'[{s.index}]')} [cyan]{s.type.name}[/cyan] {q(s.name)}  module {s.module_index} ({q(mod.name)})"
        if s.dispatch_shape is not None and any(s.dispatch_shape):
            line += "  dispatch " + " x ".join(map(str, s.dispatch_shape))
        node = segs.add(line)
        for d in s.descriptor_sets:
            sn = node.add(f"set {d.set_index}" + ("" if d.explicit else " (by position)"))
            for b in d.bindings:
                sn.add(f"binding {b.binding} -> {res(b.resource_index)}  {dtype(b.descriptor_type)}")
        for p in s.push_constant_ranges:
            node.add(f"push constants: {p.size} bytes at offset {p.offset}, stages {stage_flags_name(p.stage_flags)}")
        if s.inputs:
            node.add("inputs: " + ", ".join(f"binding {b.binding} -> resource {b.resource_index}" for b in s.inputs))
        if s.outputs:
            node.add("outputs: " + ", ".join(f"binding {b.binding} -> resource {b.resource_index}" for b in s.outputs))
        if s.constant_bindings:
            ids = ", ".join(f"constant {c.constant_index} as id {c.graph_constant_id}" for c in s.constant_bindings)
            node.add(f"constants: {ids}" + ("" if s.explicit_constant_ids else " (ids = indexes)"))

    rs = root.add(f"[bold]resources[/bold] ({len(vgf.resources)})")
    for r in vgf.resources:
        line = f"{q(f'[{r.index}]')} [cyan]{r.category.name}[/cyan] {fmt(r)} {q(list(r.shape))}"
        line += f"  strides {q(list(r.strides))}" if r.strides is not None else "  packed"
        if r.descriptor_type is not None:
            line += f"  {dtype(r.descriptor_type)}"
        if r.alias_group is not None:
            line += f"  alias group {r.alias_group}"
        node = rs.add(line)
        if r.sampler is not None:
            sp = r.sampler
            node.add(
                "sampler: "
                + ", ".join(q(_short(table.get(v, str(v)), prefix)) for table, v, prefix in (
                    (SAMPLER_FILTERS, sp.min_filter, "VK_FILTER_"), (SAMPLER_FILTERS, sp.mag_filter, "VK_FILTER_"),
                    (SAMPLER_ADDRESS_MODES, sp.address_mode_u, "VK_SAMPLER_ADDRESS_MODE_"),
                    (SAMPLER_ADDRESS_MODES, sp.address_mode_v, "VK_SAMPLER_ADDRESS_MODE_"),
                    (BORDER_COLORS, sp.border_color, "VK_BORDER_COLOR_"),
                ))
            )

    cs = root.add(f"[bold]constants[/bold] ({len(vgf.constants)})")
    for c in vgf.constants:
        ids = ", ".join(map(str, c.graph_constant_ids)) or "unused"
        sparse = f", 2:4 sparse on dimension {c.sparsity_dimension}" if c.sparsity_dimension is not None else ""
        cs.add(f"{q(f'[{c.index}]')} {res(c.resource_index)}, graph constant id {ids}, {_size(c.size)}{sparse}")

    io = root.add("[bold]model inputs and outputs[/bold] (the bindings of dispatch_graph)")
    for label, items in (("input", vgf.inputs), ("output", vgf.outputs)):
        for b in items:
            name = f" {q(repr(b.name))}" if b.name else ""
            io.add(f"{label}{name}: binding {b.binding} -> {res(b.resource_index)}")
    return root
