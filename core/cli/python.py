"""kinject from Python (a notebook, a script), one call each: :func:`run` is ``kinject run`` - the same spec,
decisions, validation, cache and run folder, through the same steps (:func:`prepared`, :func:`execute_runs`) -
returning the metrics instead of printing them; :func:`load` reads a finished run folder the same way. Reached as
``kinject.run``, ``kinject.load`` and ``kinject.RunResult`` (the `run` command's ``python``). The engine's stage lines
go to the standard ``logging`` logger ``kinject`` (``logging.basicConfig(level=logging.INFO)`` shows them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable


class RunResult(dict):
    """A run's metrics by split (``result["test"]["accuracy"]``; over ``repeats`` their mean / std / values) with
    where the run was written (``.output``) and a table view (:meth:`frame`)."""

    def __init__(self, metrics: dict, output: Path):
        super().__init__(metrics)
        self.output = Path(output)

    @property
    def not_learned(self) -> dict:
        """What learned nothing (name -> why: a constant predictor, or a score that does not beat the constant baseline
        of the gold labels): the systems of the run's paired comparison, else the run's own folders (the run, each seed,
        each task-group member) on test; {} when everything learned something."""
        found = self.get("comparison")
        if not isinstance(found, dict):
            return learned_nothing(self.output)
        names = {"baseline": found.get("baseline_name", "baseline"), "other": found.get("other_name", "other")}
        return {names[side]: flag["reason"] for side, flag in (found.get("not_learned") or {}).items()
                if isinstance(flag, dict) and flag.get("reason")}

    def frame(self):
        """The metrics as a pandas DataFrame: one row per (split, metric), the value (over repeats: mean and std)."""
        import pandas as pd

        rows = []
        for split, values in self.items():
            if not isinstance(values, dict) or split in ("train", "comparison", "dose", "probe"):
                continue
            for name, value in values.items():
                if isinstance(value, dict) and "mean" in value:
                    rows.append({"split": split, "metric": name, "value": value["mean"], "std": value["std"],
                                 "seeds": value["n"]})
                elif isinstance(value, (int, float)) and not isinstance(value, bool):
                    rows.append({"split": split, "metric": name, "value": float(value)})
        return pd.DataFrame(rows)


def run(strategy: str, task: str | None = None, model: str | None = None, *, overrides: dict[str, Any] | None = None,
        config: str | Path | None = None, output: str | Path | None = None, seed: int | None = None,
        repeats: int = 1, quick: bool = False, data_dir: str | Path | None = None,
        cache_dir: str | Path | None = None, resume: bool = False) -> RunResult:
    """Run ``strategy`` on ``task`` as ``kinject run`` does and return its metrics by split.

    ``overrides``: spec fields by dotted name, as ``--set`` takes them (``{"training.max_steps": 4, "task.path":
    "data/"}``; values are Python values); ``config``: a YAML run spec they apply to; ``quick``: the strategy's quick
    protocol and 64 examples per split. Errors are :class:`kinject.errors.KinjectError` (one line, naming the field).
    """
    from kinject.api import build_spec
    from kinject.spec_reading import load_spec_file

    _check_arguments(overrides, repeats)

    data: dict[str, Any] = load_spec_file(Path(config)) if config else {}
    data["strategy"] = {**(data.get("strategy") or {}), "name": strategy} \
        if (data.get("strategy") or {}).get("name") in (None, strategy) else {"name": strategy}
    if task:
        data["task"] = data.get("task") if (data.get("task") or {}).get("name") == task else {"name": task}
    if model:
        data.setdefault("model", {})["name"] = model
    for key, value in (("seed", seed), ("output", output), ("data_dir", data_dir), ("cache_dir", cache_dir)):
        if value is not None:
            data[key] = str(value) if isinstance(value, Path) else value
    items = dict(overrides or {})
    if quick:
        items.setdefault("protocol", "quick")
        items.setdefault("training.limit", 64)
    for key, value in items.items():
        node = data
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = str(value) if isinstance(value, Path) else value
    runs, out = prepared(build_spec(data), repeats, resume=resume, command=["kinject.run", strategy])
    return RunResult(execute_runs(runs, out), out)


def prepared(spec: Any, repeats: int, *, resume: bool, command: list[str],
             announce: Callable[[str], None] | None = None, dry_run: bool = False) -> tuple[list, Path]:
    """The steps every way of running a spec shares (`kinject run`, :func:`run`): the automatic decisions and one
    prepared run per seed (``repeats`` seeds from the spec's), and the run folder checked - a folder a run may replace -
    before anything runs. Returns (the prepared runs, the run folder)."""
    from kinject.api import prepare_runs
    from kinject.outputs import check_output
    from kinject.outputs import default_output

    out = Path(spec.output) if spec.output else default_output(spec)
    runs = prepare_runs(spec, [spec.seed + i for i in range(repeats)], resume=resume, command=command,
                        announce=announce, dry_run=dry_run)
    check_output(out, runs[0].env)
    return runs, out


def execute_runs(runs: list, out: Path, announce: Callable[[str], None] | None = None) -> dict:
    """Run prepared runs into ``out``: one run's metrics, or over several seeds their summary (mean ± std). Then say
    which of the run folders learned nothing on test (:func:`learned_nothing`), as a warning."""
    import logging

    from kinject.api import execute, is_main_process
    from kinject.engine import execute_repeats

    metrics = execute(runs[0], out) if len(runs) == 1 else execute_repeats(runs, out)
    if is_main_process():
        for folder, why in learned_nothing(out).items():
            (announce or logging.getLogger("kinject").warning)(
                f"warning: {folder} learned nothing on test: {why} (a comparison with it says nothing; "
                "docs/evidence.md)")
    return metrics


def learned_nothing(out: Path) -> dict[str, str]:
    """Run folder -> why its model learned nothing on test (the evidence library's check: a constant predictor, or a
    score that does not beat the constant baseline of the gold labels), for a run, each seed of ``--repeats`` and
    each member of a task group; {} when every one learned something."""
    from kinject.evidence import run_not_learned

    out = Path(out)
    folders = sorted(p.parent for p in out.glob("*/run.json")) or [out]
    flags = {str(folder): run_not_learned(folder) for folder in folders}
    return {folder: flag["reason"] for folder, flag in flags.items() if flag and flag.get("reason")}


def load(run_dir) -> Any:
    """A run folder that ``kinject run`` (or ``--repeats``, or a grid cell) wrote, as :class:`kinject.RunResult`:
    its metrics.json by split, ``.output`` the folder. A folder without a readable metrics.json mapping is one line
    (a :class:`kinject.errors.DataError` naming it)."""
    import json

    from kinject.api import DataError, DataMissingError

    folder = Path(run_dir).expanduser()
    path = folder / "metrics.json"
    if not path.is_file():
        raise DataMissingError("no metrics.json: not a finished run folder (kinject run writes it last)",
                               folder if not folder.is_dir() else path)
    try:
        metrics = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"not readable JSON ({exc})", path) from None
    if not isinstance(metrics, dict):
        raise DataError(f"expected a mapping of split -> metrics, got a {type(metrics).__name__}", path)
    return RunResult(metrics, folder)


def _check_arguments(overrides: Any, repeats: Any) -> None:
    """``kinject.run``'s arguments that no spec field checks: one line (a SpecError) naming the argument."""
    from kinject.api import SpecError

    if overrides is not None and not isinstance(overrides, dict):
        hint = " (a list of --set items: write them as {\"training.epochs\": 1})" if isinstance(overrides, (list, tuple)) \
            else ""
        raise SpecError(f"overrides: expected a dict of dotted field names to values, got a "
                        f"{type(overrides).__name__}{hint}")
    for key in overrides or {}:
        if not isinstance(key, str) or not key or any(not part for part in key.split(".")):
            raise SpecError(f"overrides: {key!r} is not a dotted field name (e.g. training.epochs)")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise SpecError(f"repeats: expected a whole number of seeds, 1 or more; got {repeats!r}")
