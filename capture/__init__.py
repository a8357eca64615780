"""Recording: snapshots at frame boundaries, the trace writer, and the .vkt container format."""
