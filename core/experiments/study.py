"""The optuna side of ``kinject sweep``: open (or continue) a study, run trials as kinject runs, write the
best spec. The search space and its validation are in :mod:`kinject.experiments.sweep`.

Storages: the default sqlite file, an RDB URL (``--storage postgresql://...``), or a journal file
(``--storage journal:PATH`` or a path ending in ``.log``) for machines that share a filesystem but no database."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Callable

import yaml

from kinject.api import KinjectError, SpecError
from kinject.experiments.sweep import (AUTO_FOLDS, AUTO_FOLDS_BELOW, Param, PruningReporter, base_spec_data,
                                            fold_spec, load_space, set_field, validate_space)


HEARTBEAT_S, GRACE_S = 60, 180  # a trial whose process died is failed (and retried) after GRACE_S


def _quiet_optuna():
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # heartbeats


def journal_path(url: str) -> str | None:
    """The file of a journal storage (``journal:PATH``, or a path ending in .log), else None."""
    if url.startswith("journal:"):
        return url[len("journal:"):]
    return url if url.endswith(".log") and "://" not in url else None


def open_journal(path: str):
    """optuna's journal file storage: an append-only log any process on a shared filesystem (NFS v3+, Lustre, GPFS)
    can share without a database server; a missing folder or an unwritable file -> one-line KinjectError."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

    _quiet_optuna()
    file = Path(path).expanduser()
    if not path or not file.parent.is_dir():
        raise KinjectError(f"--storage journal:{path}: cannot open the study storage (no folder {file.parent})")
    try:
        return JournalStorage(JournalFileBackend(str(file), lock_obj=JournalFileOpenLock(str(file))))
    except OSError as exc:
        raise KinjectError(f"--storage journal:{path}: cannot open the study storage ({exc.strerror or exc})") \
            from None


def open_storage(url: str, attempts: int = 5):
    """An optuna storage: a journal file (``journal:PATH`` or ``*.log``: :func:`open_journal`), else an RDB URL with
    heartbeats; an unreachable or malformed URL -> one-line KinjectError.

    Processes started together on a new storage race to create its tables; the loser's "already exists" is
    retried (the storage is then there to join)."""
    import time

    import optuna

    if journal_path(url) is not None:
        return open_journal(journal_path(url))
    _quiet_optuna()
    for attempt in range(attempts):
        try:
            return optuna.storages.RDBStorage(url, heartbeat_interval=HEARTBEAT_S, grace_period=GRACE_S)
        except Exception as exc:  # noqa: BLE001 - sqlalchemy/driver errors of every kind mean "cannot use it"
            if "already exists" in str(exc) and attempt + 1 < attempts:
                time.sleep(0.5 * (attempt + 1))
                continue
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise KinjectError(f"--storage {url}: cannot open the study storage ({type(exc).__name__}: "
                               f"{reason[:200]})") from None


def open_study(storage, name: str, direction: str):
    """Create the study or load it (``load_if_exists``), with a MedianPruner."""
    import optuna

    try:
        return optuna.create_study(storage=storage, study_name=name, direction=direction, load_if_exists=True,
                                   pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0))
    except ValueError as exc:  # e.g. an existing study optimised in the other direction
        raise KinjectError(f"study {name!r}: {exc}") from None


def finished(study) -> list:
    from optuna.trial import TrialState

    return [t for t in study.trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]


def retry_failed(study) -> int:
    """Queue every failed trial's parameters once more (an interrupted trial resumes from the cache)."""
    import optuna
    from optuna.trial import TrialState

    optuna.storages.fail_stale_trials(study)  # trials of processes that died, after the grace period
    retried = {t.user_attrs.get("retry_of") for t in study.trials}
    queued = 0
    for t in study.trials:
        if t.state == TrialState.FAIL and t.number not in retried and t.params:
            study.enqueue_trial(t.params, user_attrs={"retry_of": t.number})
            queued += 1
    return queued


def _objective(space: list[Param], base: dict, output: Path, strategy: str, metric: str, split: str,
               announce: Callable[[str], None], folds: int = 0) -> Callable:
    from kinject import api
    from kinject.api import atomic_write_text, build_spec, plugin_manager

    def run_one(trial, data: dict, run_dir: Path, pruned_by_steps: bool) -> float:
        """One kinject run of ``data`` into ``run_dir`` (spec beside it as ``<run_dir>.yaml``): its ``split`` metric."""
        config = run_dir.with_suffix(".yaml")
        atomic_write_text(config, yaml.safe_dump(data, sort_keys=False))
        spec = build_spec({**data, "output": str(run_dir)})
        run, = api.prepare_runs(spec, resume=True, announce=announce, command=[  # as its recorded command runs
            "kinject", "run", strategy, "--config", str(config), "-o", str(run_dir)])
        manager, reporter = plugin_manager(), PruningReporter(trial, metric) if pruned_by_steps else None
        if reporter:
            manager.register(reporter, name=f"kinject-sweep-trial-{trial.number}")
        try:
            metrics = api.execute(run, run_dir)
        finally:
            if reporter:
                manager.unregister(reporter)
        value = (metrics.get(split) or {}).get(metric)
        if not isinstance(value, (int, float)):
            raise KinjectError(f"trial {trial.number}: {run_dir}/metrics.json has no {split} {metric}")
        return float(value)

    def objective(trial) -> float:
        import optuna

        data = base
        for param in space:
            data = set_field(data, param.path, param.suggest(trial))
        trial.set_user_attr("spec", data)
        run_dir = output / f"trial-{trial.number}"
        announce(f"trial {trial.number}: " + ", ".join(f"{k}={v}" for k, v in trial.params.items()))
        if not folds:
            value = run_one(trial, data, run_dir, pruned_by_steps=True)
            trial.set_user_attr("run_dir", str(run_dir))
            announce(f"trial {trial.number}: {split} {metric} = {value:.4f}")
            return value
        atomic_write_text(run_dir.with_suffix(".yaml"), yaml.safe_dump(data, sort_keys=False))
        scores: list[float] = []
        for index in range(folds):  # each fold a fresh run: its own task object, stage keys holding the fold
            scores.append(run_one(trial, fold_spec(data, index, folds), run_dir / f"fold-{index}", False))
            mean = sum(scores) / len(scores)
            trial.set_user_attr("fold_scores", scores)
            trial.report(mean, index)  # pruned against other trials' means after as many folds
            if index + 1 < folds and trial.should_prune():
                raise optuna.TrialPruned(f"mean {split} {metric} {mean:.4g} after {index + 1} of {folds} folds")
        trial.set_user_attr("run_dir", str(run_dir))
        announce(f"trial {trial.number}: {split} {metric} = {mean:.4f} (mean of {folds} folds: "
                 + ", ".join(f"{v:.3f}" for v in scores) + ")")
        return mean

    return objective


def _check_objective(run, metric: str | None, split: str) -> str:
    """The metric to optimise (the task's selection metric by default); it must be scored on ``split``."""
    task, spec = run.task, run.spec
    metric = metric or task.selection_metric()
    scored = spec.training.eval_splits or list(task.eval_splits)
    if split not in scored:
        raise SpecError(f"--split {split}: the evaluate stage scores {', '.join(scored)} (task {task.name!r}; "
                        "see training.eval_splits)")
    known = task.metric_names()
    if known and metric not in known:
        raise SpecError(f"--metric {metric}: task {task.name!r} reports {', '.join(known)}")
    return metric


def choose_folds(run, folds: int | None, split: str, announce: Callable[[str], None]) -> int:
    """The number of cross-validation folds of the sweep (0: none). ``folds`` None: :data:`AUTO_FOLDS` when the
    objective is on dev and the task's train split has fewer than :data:`AUTO_FOLDS_BELOW` examples, else 0;
    0: none; K: K folds."""
    if folds is not None and folds != 0 and folds < 2:
        raise SpecError(f"--folds {folds}: cross-validation needs at least 2 folds")
    if run.task is None or run.members:  # a task group: its members' splits differ; sweep a member instead
        if folds:
            raise SpecError("--folds: cross-validation needs one task (not a task group)")
        return 0
    if run.spec.fold:
        if folds:
            raise SpecError(f"--folds: the spec already sets fold={run.spec.fold}; remove one of them")
        return 0
    from kinject.choice import fold_problem

    examples = run.task.examples(run.task.train_split, run.env)
    if folds is None:
        if len(examples) >= AUTO_FOLDS_BELOW or split != "dev":  # automatic only in place of scoring dev
            return 0
        problem = fold_problem(examples, AUTO_FOLDS)
        if problem is not None:
            announce(f"{run.task.name}: the train split has {len(examples)} examples (< {AUTO_FOLDS_BELOW}), but "
                     f"{problem}: each trial is scored on the dev split instead (--folds K for fewer folds)")
            return 0
        folds = AUTO_FOLDS
        announce(f"{run.task.name}: the train split has {len(examples)} examples (< {AUTO_FOLDS_BELOW}): each trial "
                 f"is scored by {folds}-fold cross-validation on it (--folds K to choose K, --no-folds to score the "
                 "dev split instead); test is never scored")
    if folds and split != "dev":
        raise SpecError(f"--split {split}: with cross-validation each trial is scored on its folds' held-out part "
                        "(dev); pass --no-folds to score another split")
    problem = fold_problem(examples, folds) if folds else None
    if problem is not None:
        raise SpecError(f"--folds {folds}: the train split cannot be shared out: {problem}")
    return folds


def run_sweep(strategy: str, task: str | None, space_file: Path, trials: int, output: Path, *,
              storage: str | None = None, metric: str | None = None, direction: str | None = None,
              split: str = "dev", study_name: str | None = None, config: Path | None = None,
              sets: list[str] | None = None, fields: dict[str, Any] | None = None, seed: int = 0,
              folds: int | None = None, announce: Callable[[str], None] = print) -> dict[str, Any]:
    """Validate everything, then run trials until the study has ``trials`` finished ones; write best.yaml.

    ``folds``: None decides by the train split's size (:func:`choose_folds`), 0 scores ``split`` of each trial's
    run, K >= 2 scores each trial by K-fold cross-validation on the train split (the mean of the folds' dev
    scores); best.yaml is then the plain spec, which ``kinject run`` trains on the whole train split."""
    import optuna

    from kinject import api
    from kinject.api import build_spec

    if direction not in (None, "maximize", "minimize"):
        raise SpecError(f"--direction {direction}: expected maximize or minimize")
    base = base_spec_data(strategy, task, config, sets, fields or {})
    space = load_space(space_file)
    validate_space(space, base, space_file)
    run = api.prepare(build_spec(base))  # data, model, plugins: every user error before any trial
    folds = choose_folds(run, folds, split, announce)
    if folds:
        announce(f"cost: {trials} trial(s) x {folds} folds = {trials * folds} fine-tuning runs (cached stages shared)")
    if folds:
        run = api.prepare(build_spec(fold_spec(base, 0, folds)))  # the fold runs' spec must be valid too
    metric = _check_objective(run, metric, split)
    direction = direction or ("maximize" if run.task.greater_is_better(metric) else "minimize")  # the metric's own
    output = Path(output)
    name = study_name or f"kinject-{base['strategy']['name']}-{base['task']['name']}"
    from filelock import FileLock

    from kinject.files import check_writable

    store = open_storage(storage) if storage else None  # a bad URL fails before anything is written
    check_writable(output, "sweep folder")
    with FileLock(str(output / ".study.lock")):  # processes started together create one study and all join it
        store = store or open_storage(f"sqlite:///{(output / 'study.db').resolve()}")
        study = open_study(store, name, direction)
        _check_study_folds(study, name, folds)
    study.sampler = sampler_for(space, seed + len(study.trials), announce)  # reproducible per invocation
    queued = retry_failed(study)
    if queued:
        announce(f"retrying {queued} failed trial(s) with their parameters")
    remaining = trials - len(finished(study))
    if remaining > 0:
        objective = _objective(space, base, output, base["strategy"]["name"], metric, split, announce, folds)
        study.optimize(objective, n_trials=remaining,
                       callbacks=[optuna.study.MaxTrialsCallback(trials, states=(
                           optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED))])
    else:
        announce(f"study {name!r} already has {len(finished(study))} finished trial(s) (asked for {trials})")
    best = write_best(study, output, folds)
    return {"study": name, "storage": storage or f"sqlite:///{output / 'study.db'}", "metric": metric,
            "split": split, "direction": direction, "folds": folds, "best": best,
            "trials": [{"number": t.number, "state": t.state.name, "value": t.value, "params": t.params,
                        "fold_scores": t.user_attrs.get("fold_scores")} for t in study.trials]}


def sampler_for(space: list, seed: int, announce: Callable[[str], None] = print):
    """Optuna's sampler for a space: a grid (every combination once, in a seeded order) when every field is a list
    of choices - a categorical space sampled at random repeats some choices and misses others - else TPE."""
    import optuna

    if space and all(field.choices is not None for field in space):
        grid = {field.path: list(field.choices) for field in space}
        size = 1
        for values in grid.values():
            size *= len(values)
        announce(f"every searched field is a list of choices: a grid of {size} combination(s), each tried once "
                 "(trials beyond that repeat none)")
        return optuna.samplers.GridSampler(grid, seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


def _check_study_folds(study, name: str, folds: int) -> None:
    """A study's trials are scored one way: record the folds of a new study, refuse to continue one scored
    otherwise (its values would not be comparable)."""
    recorded = study.user_attrs.get("folds", 0 if study.trials else None)
    if recorded is None:
        study.set_user_attr("folds", folds)
        return
    if recorded != folds:
        def how(k: int) -> str:
            return f"{k}-fold cross-validation of the train split" if k else "a split of each trial's run"

        again = f"--folds {recorded}" if recorded else "--no-folds"
        raise KinjectError(f"study {name!r} scores its trials by {how(recorded)}, this sweep by {how(folds)}; "
                           f"pass {again} to continue it, or use another --output (or --study)")


def write_best(study, output: Path, folds: int = 0) -> dict[str, Any] | None:
    """``output/best.yaml``: the best finished trial's spec (None when no trial completed); with ``folds``, the
    plain spec (no ``fold``): run, it trains on the whole train split."""
    from optuna.trial import TrialState

    from kinject.api import atomic_write_text

    if not any(t.state == TrialState.COMPLETE for t in study.trials):
        return None
    best = study.best_trial
    path = Path(output) / "best.yaml"
    how = f", the mean of {folds} folds of the train split (this spec trains on all of it)" if folds else ""
    header = f"# kinject sweep {study.study_name}: trial {best.number}, value {best.value!r}{how}\n"
    atomic_write_text(path, header + yaml.safe_dump(best.user_attrs["spec"], sort_keys=False))
    return {"trial": best.number, "value": best.value, "params": best.params, "path": str(path)}
