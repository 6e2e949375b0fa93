"""Automatic decisions, the kernel's side: the one path from a spec to prepared runs (:func:`prepare_runs`) that
every entry point takes - ``kinject run``, ``kinject.run``, grid cells, sweep trials - so a run and its recorded
command are the same experiment.

The kernel holds only the interface; the policy (what to choose, which default rules) is a hook plugin's
(``kinject_choose`` and ``kinject_default_rules`` in :mod:`kinject.hooks.specs`; the training library's
``decisions`` plugin by default, which a plugin replaces with a ``tryfirst`` implementation). The first
implementation that answers decides; run.json records what it decided and which implementation that was
(``chosen``, ``defaults``, ``decided_by``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # pragma: no cover
    from kinject.context import RunContext
    from kinject.spec import RunSpec

log = logging.getLogger("kinject")


def first_answer(hook: str, **kwargs: Any) -> tuple[Any, str | None]:
    """(the first non-None answer of hook ``hook`` in pluggy's call order, the name of the plugin that gave it);
    (None, None) when no implementation answers."""
    from kinject.hooks import plugin_manager

    manager = plugin_manager()
    for impl in reversed(getattr(manager.hook, hook).get_hookimpls()):  # pluggy's order: tryfirst, last registered
        if getattr(impl, "hookwrapper", False) or getattr(impl, "wrapper", False):
            continue
        answer = impl.function(*[kwargs[name] for name in impl.argnames])
        if answer is not None:
            module = getattr(impl.plugin, "__name__", type(impl.plugin).__module__)
            return answer, f"{impl.plugin_name} ({module})"
    return None, None


def decide(spec: "RunSpec", announce: Callable[[str], None] | None = None,
           dry_run: bool = False) -> tuple["RunSpec", dict | None]:
    """``spec`` with the settings the ``kinject_choose`` implementation chose, and its record (None: nothing was
    decided). ``dry_run``: nothing costly runs; the record says what deciding would cost."""
    answer, by = first_answer("kinject_choose", spec=spec, announce=announce or log.info, dry_run=dry_run)
    if answer is None:
        return spec, None
    chosen, record = answer
    return chosen, ({**record, "implementation": by} if record is not None else None)


def default_rules(run: "RunContext") -> dict[str, str]:
    """Apply the ``kinject_default_rules`` implementation to a prepared run; ``{field: why}``."""
    answer, by = first_answer("kinject_default_rules", run=run)
    if by is not None:
        run.decided_by["defaults"] = by
    return dict(answer or {})


def prepare_runs(spec: "RunSpec", seeds: list[int] | None = None, *, resume: bool = False,
                 command: list[str] | None = None, announce: Callable[[str], None] | None = None,
                 dry_run: bool = False) -> list["RunContext"]:
    """The automatic decisions (:func:`decide`), then one prepared run per seed (``seeds``; default the spec's),
    each recording what was decided. What ``kinject run``, ``kinject.run``, a grid cell and a sweep trial call."""
    from kinject.preparation import prepare

    spec, chosen = decide(spec, announce, dry_run)
    runs = [prepare(spec.model_copy(update={"seed": seed}), resume=resume, command=command)
            for seed in (seeds or [spec.seed])]
    for run in runs:
        run.chosen = chosen
        if chosen is not None:
            run.decided_by["chosen"] = chosen.get("implementation", "")
    _announce_defaults(runs[0], announce or log.info)
    return runs


def _announce_defaults(run: "RunContext", announce: Callable[[str], None]) -> None:
    """Say the settings decided for the user that the spec did not set: the protocol's and the task's recommended
    values, the default training rules, and the facts held out of every knowledge source by default (run.json:
    ``protocol``, ``recommended``, ``defaults``, ``decided_by``)."""
    if run.protocol:
        announce(f"protocol {run.spec.protocol}: {', '.join(f'{k}={v}' for k, v in run.protocol.items())}")
    if run.recommended:
        announce(f"task {run.task.name}: recommended settings {', '.join(f'{k}={v}' for k, v in run.recommended.items())}"
                 " (set any of them to override; --set recommended=false for none)")
    for name, why in run.defaults.items():
        announce(f"{name}={why} (set it to override)")
    if "exclude" in run.decided_by and run.holdout is not None:
        splits = run.spec.knowledge.exclude
        announce(f"knowledge.exclude=[{', '.join(splits)}]: {run.holdout.facts} facts (head-tail name pairs; "
                 f"{len(run.holdout.held_out().keys)} triples) of {run.task.name}'s "
                 f"{'/'.join(splits)} items held out of every knowledge source (default of "
                 f"{run.decided_by['exclude']}; --set knowledge.exclude=[] keeps them)")
