"""The `kinject` command line (typer + rich).

The console entry point is :func:`main`: `kinject list` is served without loading the typer app (fast path);
everything else goes to :mod:`kinject.cli.main`.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    """Console entry point. User errors -> one line on stderr, exit code 2."""
    import os

    argv = list(sys.argv[1:] if argv is None else argv)
    # oneDNN (bf16 matmuls on a CPU) caches a primitive per batch shape, 1024 by default: with length-bucketed
    # batches that is ~200 MB held for the process's life, for no measurable speed (docs/benchmarks.md)
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "16")
    if argv[:1] == ["list"]:
        from kinject.cli.listing import fast_list
        from kinject.errors import KinjectError

        try:
            if fast_list(argv):
                return
        except KinjectError as exc:
            if "--debug" in argv:
                raise
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(exc.exit_code)
    from kinject.cli.main import main as full_main

    full_main(argv)
