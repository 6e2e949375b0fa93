"""The example plugins installed as a third party installs them: each built into a wheel (``pip wheel``, offline, no
build isolation), the wheel pip-installed into a folder the test puts on PYTHONPATH."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

PLUGINS = Path(__file__).parent / "plugins"


def installed(tmp_path: Path, *names: str) -> dict:
    """An environment in which the example plugins ``names`` are installed from wheels built here."""
    target, wheels = tmp_path / "site", tmp_path / "wheels"
    for name in names:  # built from a copy: parallel test workers never share a build folder
        source = shutil.copytree(PLUGINS / name, tmp_path / "src" / name,
                                 ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                        "--wheel-dir", str(wheels), str(source)], check=True, capture_output=True, timeout=300)
    built = sorted(wheels.glob("*.whl"))
    assert len(built) == len(names), built
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target",
                    str(target), *map(str, built)], check=True, capture_output=True, timeout=300)
    path = [str(target), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]  # "" would be the cwd
    return dict(os.environ, PYTHONPATH=os.pathsep.join(path),
                COLUMNS="300", ECHO_TRACKER_FILE=str(tmp_path / "events.jsonl"))
