"""``python -m vkcap`` and the ``vkcap`` console script.

Ctrl-C at any moment exits 130 without a traceback: also while the command line's modules are still
being imported, before :func:`vkcap.cli.main` can catch it.
"""
import os
import sys


def launch() -> None:
    """Set the heap policy (:mod:`vkcap.heap`), import the command line and run it; never returns."""
    try:
        # lazy: inside the try, so that Ctrl-C while importing exits 130
        from .heap import keep_large_buffers

        keep_large_buffers()
        # lazy: after keep_large_buffers(), which must set the heap policy before the command line's imports allocate
        from .cli import entry
    except KeyboardInterrupt:
        print("vkcap: interrupted", file=sys.stderr)
        os._exit(130)
    entry()


if __name__ == "__main__":
    launch()
