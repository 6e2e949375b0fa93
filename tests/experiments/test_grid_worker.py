"""A grid's worker: immune to a `kinject/` folder in the working folder (python -P), and a failed worker's cause -
not submitit's "Job failed during processing" - in the cell's status line."""

from __future__ import annotations

import sys

import pytest

from kinject.experiments.grid_exec import SAFE_PATH, worker_error

TRACE = """Job (task=0) failed during processing with trace:
----------------------
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/submitit/core/_submit.py", line 11, in <module>
    submitit_main()
  File "/work/kinject/core/__init__.py", line 3, in <module>
AttributeError: module 'kinject' has no attribute '__version__'
----------------------
You can check full logs with 'job.stderr(0)' and 'job.stdout(0)'or at paths:
  - /runs/_grid/logs/123_0_log.err
"""


class _Failed(Exception):
    pass


class _Job:
    def __init__(self, log: str):
        self.log = log

    def stderr(self):
        return self.log


def test_a_failed_worker_reports_its_cause_in_one_line():
    assert worker_error(_Failed(TRACE)) == "AttributeError: module 'kinject' has no attribute '__version__'"
    log = "loading...\nTraceback (most recent call last):\n  x\nkinject.errors.SpecError: task.path: missing\n"
    assert worker_error(_Failed("Job (task=0) failed during processing with trace:"), _Job(log)) == \
        "kinject.errors.SpecError: task.path: missing"
    assert worker_error(_Failed("killed")) == "_Failed: killed"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="python -P is 3.11+")
def test_workers_never_put_the_working_folder_on_the_path():
    assert SAFE_PATH == ("-P",)
