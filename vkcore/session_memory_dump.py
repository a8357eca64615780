"""``--session-memory-dump-dir``: the memory of every graph session, as text, once the run is over.

The files are the reference runner's, byte for byte: ``Graph_Pipeline_<P>_Session_RAM_<M>.txt``, where
``P`` counts the graph pipelines that have session memory, in the order of the scenario's graph
dispatches and of each model's segments, and ``M`` counts that pipeline's session memory objects. Each
file is a newline, then one line per 16 bytes: the offset as 8 upper-case hex digits, a colon, three
spaces, then each byte as two upper-case hex digits and a space; the last line has no newline.

The reference makes a pipeline per dispatch; vkcap shares one between identical dispatches, so such
dispatches each get a file, all holding what the shared session holds after the last of them.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .outputs import write_atomic

if TYPE_CHECKING:
    from .session import Session

BYTES_PER_LINE = 16


def session_ram_text(data: bytes) -> str:
    """``data`` in the reference's hex layout (see the module's docstring)."""
    lines = []
    for offset in range(0, len(data), BYTES_PER_LINE):
        chunk = data[offset : offset + BYTES_PER_LINE]
        lines.append(f"{offset:08X}:   " + "".join(f"{b:02X} " for b in chunk))
    return "\n" + "\n".join(lines)


def dump_session_memories(session: "Session", folder: Path) -> list[Path]:
    """Write the memory of every graph session of ``session`` into ``folder`` (created when missing);
    return the files written. Each file is replaced whole or left as it was (see
    :func:`vkcore.outputs.write_atomic`). Call with no frame in flight."""
    written: list[Path] = []
    pipeline = 0
    for _, graph in sorted(session.graphs.items()):
        for memories in graph.session_memories():
            for index, data in enumerate(memories):
                path = folder / f"Graph_Pipeline_{pipeline}_Session_RAM_{index}.txt"
                write_atomic(path, [session_ram_text(data).encode("ascii")])
                written.append(path)
            pipeline += 1
    return written
