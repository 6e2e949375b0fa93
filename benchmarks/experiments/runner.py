"""The command line every experiment script shares: print its `kinject` commands, or run them (`--run`)."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from typing import Callable


def main(doc: str, grid: Callable[[str, bool], list[list[str]]], default_out: str) -> None:
    """``grid(out, pilot)`` -> the commands (each starting with ``kinject``), printed and optionally run."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--run", action="store_true", help="execute the commands (default: print them)")
    parser.add_argument("--pilot", action="store_true", help="only the pilot")
    parser.add_argument("--out", default=default_out, help="parent folder of the run directories")
    args = parser.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    for cmd in grid(args.out, args.pilot):
        print(shlex.join(cmd), flush=True)
        if args.run:
            binary = os.path.join(os.path.dirname(sys.executable), cmd[0])
            subprocess.run([binary, *cmd[1:]], env=env, check=True)
