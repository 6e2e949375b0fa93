"""Helpers shared by tests (imported as ``from helpers import ...``; tests/ is on sys.path under pytest)."""

from __future__ import annotations

import textwrap
from pathlib import Path


def run_kinject(*args: str) -> int:
    """Run the kinject CLI in-process; return its exit code."""
    from kinject.cli.main import main

    try:
        main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def free_port() -> str:
    """A TCP port free right now, for a torchrun rendezvous: fixed ports collide when xdist runs two DDP tests."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def fake_distribution(root: Path, name: str, entry_points: str, modules: dict[str, str]) -> Path:
    """A minimal installed distribution (dist-info + modules) on a folder we can put on sys.path."""
    info = root / f"{name.replace('-', '_')}-1.2.3.dist-info"  # dist-info names use underscores
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.2.3\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    for module, source in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))
    return root


PROBE_STAGES = ("probe-base", "probe")  # the knowledge probe's stages, which every run with a task gets


def one_line_error(capsys, args) -> str:
    """Run kinject with ``args``, expect exit 2 and exactly one "error:" line on stderr; return it."""
    capsys.readouterr()
    assert run_kinject(*args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:"), err
    return err[0]
