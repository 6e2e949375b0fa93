"""A third-party lifecycle observer: appends every event to $ECHO_TRACKER_FILE (JSON lines)."""

import json
import os

from kinject.api import hookimpl


def _write(event, **fields):
    path = os.environ.get("ECHO_TRACKER_FILE")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"event": event, **fields}, default=str) + "\n")


@hookimpl
def kinject_run_start(spec, run_dir):
    _write("run_start", strategy=spec["strategy"]["name"])


@hookimpl
def kinject_stage_end(stage, key, cached, seconds):
    _write("stage_end", stage=stage, cached=cached)


@hookimpl
def kinject_run_end(spec, run_dir, metrics):
    _write("run_end", splits=sorted(metrics))
