"""The .vkt trace format, as a leaf: what the bytes of a trace are, and nothing that reads or writes a file.

- :mod:`.records`: the container's byte layout (file header, record headers, BLOB headers, INDEX,
  TRAILER, msgpack with limits) and its pure (de)serializers;
- :mod:`.kinds`: the ``kind`` of each META record;
- :mod:`.limits`: the caps a reader holds every declared size and depth to;
- :mod:`.errors`: the container's errors (not a trace, unsupported version, corrupt, over a limit);
- :mod:`.codecs`: one module per codec and the one table they are looked up in.

It does no device work and no file I/O, and imports nothing of vkcore's device side, of capture's
writer, reader or recorder, of replay or of vkcap: only the standard library, msgpack, xxhash,
zstandard and capture's compiled loops (:mod:`capture.kernels`). docs/trace-format.md is normative.
"""
