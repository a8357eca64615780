"""Data graphs: VGF files, graph pipelines and sessions, dispatches of their segments, SPIR-V graphs, optical flow, graph dumps."""
