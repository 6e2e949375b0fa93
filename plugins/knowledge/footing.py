"""The knowledge library's side of knowledge on one footing: the hook plugin ``knowledge`` (entry point group
``kinject.hooks``) that answers the kernel's

* ``kinject_held_out_facts``: the held-out facts as :class:`.held_out.HeldOutFacts` (names matched by their words);
* ``kinject_default_exclude``: a run that leaves ``knowledge.exclude`` unset holds out the facts of its task's dev and
  test items (:data:`DEFAULT_EXCLUDE`: the comparison is one of generalisation; ``[]`` is memorisation);
* ``kinject_run_dose``: the run's ``dose`` is the sum of its stages' (:func:`.dose.combine_doses`), announced in one
  line (:func:`.dose.dose_line`);
* ``kinject_show_section``: the ``probe`` and ``dose`` lines under a finished run's metrics table.

The kernel applies the hold-out the same way for every source (:class:`kinject.api.HeldOutSource`); a plugin replaces
any of these with its own ``@hookimpl(tryfirst=True)``, and run.json's ``decided_by`` names who set the hold-out.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from kinject.api import file_digest, hookimpl
from kinject.plugins.training import format_value

from .dose import combine_doses, dose_line
from .held_out import HeldOutFacts
from .provenance import DEFAULT_EXCLUDE

NAME = "knowledge"  # the entry point's name
log = logging.getLogger("kinject")


@hookimpl
def kinject_held_out_facts(triples: list, files: tuple) -> HeldOutFacts:
    return _held_out(tuple(tuple(t) for t in triples), tuple((str(f), file_digest(f)) for f in files))


@functools.lru_cache(maxsize=4)
def _held_out(triples: tuple, files: tuple) -> HeldOutFacts:
    """The held-out facts, built once per process for the same triples and file contents (a file streamed, kept
    compact): the seeds of --repeats, grid cells and sweep trials share one read of a large exclude file."""
    return HeldOutFacts(triples, files=[path for path, _ in files])


@hookimpl
def kinject_default_exclude(run) -> list[str]:
    return list(DEFAULT_EXCLUDE)


@hookimpl
def kinject_run_dose(stages) -> dict | None:
    dose = combine_doses(stages)
    if dose is not None:
        log.info("%s", dose_line(dose))
    return dose


def _mean(value: Any) -> Any:
    return value["mean"] if isinstance(value, dict) and "mean" in value else value


@hookimpl
def kinject_show_section(console, name: str, section: Any) -> bool | None:
    """The knowledge probe's line (AUROC against the base model's, the gain and its interval, one sentence when the
    interval excludes 0) and the dose's (over seeds: the means)."""
    if name == "probe" and isinstance(section, dict) and _mean(section.get("auroc")) is not None:
        low, high = _mean(section.get("gain_auroc_low")), _mean(section.get("gain_auroc_high"))
        interval = f" [{low:+.4f}, {high:+.4f}]" if isinstance(low, float) and isinstance(high, float) else ""
        kind = "generalisation" if _mean(section.get("generalisation")) else "memorisation"
        sentence = probe_sentence(low, high)
        console.print(f"knowledge probe ({kind}): AUROC {format_value(section['auroc'])} (base model "
                      f"{format_value(section.get('base_auroc'))}), gain {_mean(section.get('gain_auroc')):+.4f}"
                      f"{interval}" + (f": {sentence}" if sentence else ""), highlight=False, soft_wrap=True)
        return True
    if name == "dose" and isinstance(section, dict) and "distinct" in section:
        try:
            console.print(dose_line({k: _mean(v) for k, v in section.items()}), highlight=False, soft_wrap=True)
        except (KeyError, TypeError, ValueError):
            pass
        return True
    return None


def probe_sentence(low, high) -> str:
    """One plain sentence for a probe AUROC gain whose interval excludes 0 (else "")."""
    if not (isinstance(low, float) and isinstance(high, float)):
        return ""
    if high < 0:
        return ("the probe's AUROC fell below the base model's: this model's frozen features separate these facts "
                "less well than the base model's did")
    if low > 0:
        return ("the probe's AUROC rose above the base model's: this model's frozen features separate these facts "
                "better than the base model's did")
    return ""
