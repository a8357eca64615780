"""The ``kind`` of each META record of a trace (see docs/trace-format.md, "Higher-level records")."""

HEADER = "header"  # once, first: versions, host, command line, recording options
SCENARIO = "scenario"  # once: the original scenario JSON and its portable copy
FILE = "file"  # one per embedded file: trace name, role, blob
SPIRV = "spirv"  # one per shader: the SPIR-V that ran
FINGERPRINT = "fingerprint"  # once: the device and driver
RESOURCES = "resources"  # once: kind, size, format, dims of every capturable resource
VIEWS = "views"  # once: each buffer's view (capture.views.View as JSON), derived from the shaders' SPIR-V
CHECKPOINT = "checkpoint"  # full state after frame `seq` (-1: the initial state)
FRAME = "frame"  # one per executed frame: its snapshots
END = "end"  # last: how the recording ended
