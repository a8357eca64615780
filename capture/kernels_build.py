"""Builds the encoders' compiled loops: ``kernels.c`` into ``_kernels.so`` (a plain shared library, no
Python headers: one build serves every Python version on the machine), and its declarations into
``_kernels_cdefs.py``, cffi's out-of-line ABI module (parsed here once, not by pycparser in every process).

    python -m capture.kernels_build            # what `make setup` runs; again after editing kernels.c
    python -m capture.kernels_build --cdefs    # after editing DECLARATIONS: rewrite _kernels_cdefs.py

The library is a build output (not committed); tests/test_kernels.py checks that the committed cdefs
module is what DECLARATIONS give.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "kernels.c"
LIBRARY = HERE / "_kernels.so"
MODULE = "capture._kernels_cdefs"
#: what capture/kernels.py calls (kernels.c documents each)
DECLARATIONS = """
size_t vkcap_residual(const void *cur, const void *a, const void *b, void *out, void *keep, size_t n, int width,
                      int zigzag);
int vkcap_zigzag(void *d, size_t n, int width);
size_t vkcap_sparse(const void *e, size_t n, int width, int zigzag, uint8_t *bits, void *values, size_t count);
size_t vkcap_residual_sparse(const void *cur, const void *a, const void *b, void *keep, uint8_t *bits, void *values,
                             size_t n, int width);
size_t vkcap_zeros(const void *e, size_t n, int width);
int vkcap_plane(const void *src, size_t n, int width, int k, uint8_t *plane);
int vkcap_restore(const void *z, const void *a, const void *b, void *out, size_t n, int width);
int vkcap_unplane(const uint8_t *plane, size_t n, int width, int k, uint8_t *dst);
size_t vkcap_count_bits(const uint8_t *bits, size_t n);
size_t vkcap_unsparse(const uint8_t *bits, const void *values, size_t count, size_t n, int width, void *out);
"""
#: -O3 vectorizes the loops for the baseline x86-64 (SSE2) or aarch64 (NEON) the machine's Python runs on.
CFLAGS = ("-O3", "-fPIC", "-shared", "-std=c99", "-Wall", "-Wextra", "-Werror")


def compile_library(target: Path = LIBRARY) -> None:
    """Compile ``kernels.c`` into ``target``, written beside it and renamed into place (a process
    loading the library meanwhile sees the old one or the new one, never half of one)."""
    cc = shlex.split(os.environ.get("CC", "cc"))
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    try:
        subprocess.run([*cc, *CFLAGS, "-o", str(partial), str(SOURCE)], check=True, timeout=300)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def emit_cdefs(target: Path) -> None:
    """Write the out-of-line FFI module for DECLARATIONS to ``target``."""
    # lazy: vkcap replay imports this module, not cffi
    import cffi

    builder = cffi.FFI()
    builder.cdef(DECLARATIONS)
    builder.set_source(MODULE, None)
    builder.emit_python_code(str(target))


if __name__ == "__main__":
    if "--cdefs" in sys.argv[1:]:
        emit_cdefs(HERE / "_kernels_cdefs.py")
    else:
        compile_library()
