"""The dose (``dose.json`` in a stage's output, :func:`write_dose`): what a stage consumed - rows, facts with repeats,
distinct facts, epochs of its rows, tokens - and the digest of the facts it covered. The engine adds the stages' doses
up into the run's metrics.json ``dose`` (:func:`combine_doses`) and announces it (:func:`dose_line`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from kinject.api import facts_digest

DOSE_FILE = "dose.json"  # a stage's dose (numbers and the covered facts' digest)
DOSE_FACTS = "dose-facts.npy"  # the sorted 64-bit keys of the facts it covered (for the run's union)


def write_dose(folder: Path, *, unit: str, covered: np.ndarray, seen: int, rows_seen: int, rows_total: int,
               available: int | None = None, tokens: int | None = None, **extra: Any) -> dict:
    """Write a stage's dose into ``folder`` (``dose.json`` and ``dose-facts.npy``) and return it.

    ``unit``: what a fact is ("triples", "texts", "facts in context"); ``covered``: the keys
    (:func:`kinject.api.fact_key`, or any 64-bit key of a text) of the distinct facts the stage consumed; ``seen``:
    facts consumed with repeats; ``rows_seen`` / ``rows_total``: training rows consumed / in one epoch (``epochs`` is
    their ratio);
    ``available``: distinct facts the stage could have consumed; ``tokens``: non-padding tokens consumed.
    """
    covered = np.unique(np.asarray(covered, dtype=np.uint64))
    dose = {"unit": unit, "seen": int(seen), "distinct": int(len(covered)),
            "available": int(available) if available is not None else None,
            "coverage": round(len(covered) / available, 6) if available else None,
            "rows_seen": int(rows_seen), "rows_total": int(rows_total),
            "epochs": round(rows_seen / rows_total, 6) if rows_total else 0.0,
            "tokens": int(tokens) if tokens is not None else None, "digest": facts_digest(covered), **extra}
    Path(folder).mkdir(parents=True, exist_ok=True)
    np.save(Path(folder) / DOSE_FACTS, covered, allow_pickle=False)
    (Path(folder) / DOSE_FILE).write_text(json.dumps(dose, indent=2, default=str))
    return dose


def combine_doses(stages: list[tuple[str, Path]]) -> dict | None:
    """The run's ``dose`` from the stages that wrote one (name, folder): totals (facts seen, rows, tokens), the
    distinct facts and digest of their union, the epochs of the largest stage (each stage's own under
    ``stages``), and ``held_out``: the most triples or text statements the hold-out removed from what one of them
    consumed (its dose's count, else its stage.json's). None when no stage consumed knowledge."""
    doses, found = [], []
    for name, folder in stages:
        path = Path(folder) / DOSE_FILE
        if path.is_file():
            dose = json.loads(path.read_text())
            facts = Path(folder) / DOSE_FACTS
            keys = np.load(facts, allow_pickle=False) if facts.is_file() else np.zeros(0, np.uint64)
            doses.append((name, dose, keys))
            found.append((Path(folder), dose))
    if not doses:
        return None
    union = np.unique(np.concatenate([keys for _, _, keys in doses]))
    units = sorted({d["unit"] for _, d, _ in doses})
    available = [d.get("available") for _, d, _ in doses]
    total_available = sum(available) if all(a is not None for a in available) else None

    def total(field: str) -> int | None:
        values = [d.get(field) for _, d, _ in doses]
        return sum(values) if all(v is not None for v in values) else None

    rows_seen, rows_total = total("rows_seen"), total("rows_total")
    out = {"unit": units[0] if len(units) == 1 else "+".join(units), "seen": total("seen"), "distinct": int(len(union)),
           "available": total_available, "coverage": round(len(union) / total_available, 6)
           if total_available else None, "rows_seen": rows_seen, "rows_total": rows_total,
           "epochs": round(rows_seen / rows_total, 6) if rows_total else 0.0, "tokens": total("tokens"),
           "digest": facts_digest(union)}
    held = [d["held_out"] if d.get("held_out") is not None else _stage_held_out(folder) for folder, d in found]
    held = [h for h in held if h is not None]
    if held:
        out["held_out"] = max(held)
    if len(doses) > 1:
        out["stages"] = {name: dose for name, dose, _ in doses}
    return out


def _stage_held_out(folder: Path) -> int | None:
    """What the hold-out removed from the knowledge a stage consumed, as the stage runner recorded it in its
    stage.json (``held_out``: the sources it read and its inputs'); None when nothing was held out."""
    from kinject.api import KinjectError, read_record

    try:
        held = read_record(folder / "stage.json").get("held_out")
    except KinjectError:
        return None
    return held if isinstance(held, int) and not isinstance(held, bool) else None


def dose_line(dose: dict) -> str:
    """One line for the console: the dose of a run (over --repeats: the means)."""
    def count(value) -> str:
        return f"{value:,.0f}"

    parts = [f"{count(dose['distinct'])} distinct {dose.get('unit', 'facts')}"]
    if dose.get("available"):
        parts[0] += f" of {count(dose['available'])} ({dose['coverage']:.0%})"
    parts.append(f"{count(dose['seen'])} seen")
    parts.append(f"{dose['epochs']:.3g} epochs of its rows")
    if dose.get("tokens"):
        parts.append(f"{count(dose['tokens'])} tokens")
    if dose.get("held_out") is not None:
        parts.append(f"{count(dose['held_out'])} held out")
    digest = f" (digest {dose['digest']})" if dose.get("digest") else ""
    return "knowledge dose: " + ", ".join(parts) + digest
