"""The random draws a comparison's seeds share: a stage whose key is the same in several seed runs of a system (one
KG retraining, one teacher, one intermediate task, one MoP partition for every fine-tuning seed) was drawn once for
all of them.

kinject knows this from run.json's ``stages`` (each stage's name and key) and each stage's config type: a stage
whose config has a seed field (``seed``, ``kg_seed``, ...) is a random draw; one without (data, a report, a given
mask) computes the same thing whoever runs it. A config type that cannot be found is counted as a draw. A stage
both compared systems ran with the same key is common to them (the base model's probe) and is not counted.

:func:`draw_labels` groups a comparison's paired seeds by the draws they share: the interval's seed part is then over
the distinct draws (:func:`~kinject.evidence.bootstrap.interval_set`'s ``draws``), and with one draw for every seed
the verdict is conditional on it (:func:`conditional_text`).
"""

from __future__ import annotations

import importlib
import re
import sys
from functools import lru_cache
from typing import Any, Mapping

SEED_FIELD = re.compile(r"(^|_)seed$")


@lru_cache(maxsize=None)
def _config_class(config_type: str, strategy: str) -> Any:
    """The stage config class named ``module.QualName``, after importing the run's strategy plugin (whose modules
    define its stage configs); a ``kinject.`` module is imported by name. None when it cannot be found."""
    module_name, _, qualname = config_type.rpartition(".")
    if module_name not in sys.modules:
        try:
            from kinject.api import registry

            registry("strategies").get(strategy)
        except Exception:  # noqa: BLE001 - a strategy no longer installed: its configs are unknown
            pass
    module = sys.modules.get(module_name)
    if module is None and module_name.startswith("kinject."):
        try:
            module = importlib.import_module(module_name)
        except Exception:  # noqa: BLE001 - a module that moved or went: unknown
            return None
    found: Any = module
    for part in qualname.split(".") if module is not None else ():
        found = getattr(found, part, None)
    return found


def is_draw(config_type: Any, strategy: str = "") -> bool:
    """Whether a stage of this config type (run.json's ``config_type``) draws at random: its config has a seed
    field. An unknown type counts as a draw."""
    if not isinstance(config_type, str) or "." not in config_type:
        return True
    found = _config_class(config_type, strategy)
    fields = getattr(found, "model_fields", None)
    if not isinstance(fields, Mapping):
        return True
    return any(SEED_FIELD.search(name) for name in fields)


def seed_draws(info: Any) -> dict[str, str]:
    """The random-draw stages of one run (its run.json as a dict): stage name -> key. Entries that are not what
    kinject writes are skipped."""
    stages = info.get("stages") if isinstance(info, dict) else None
    strategy = ((info.get("spec") or {}).get("strategy") or {}).get("name", "") if isinstance(info, dict) else ""
    out: dict[str, str] = {}
    for stage in stages if isinstance(stages, list) else []:
        if not isinstance(stage, dict):
            continue
        name, key = stage.get("name"), stage.get("key")
        if isinstance(name, str) and isinstance(key, str) and is_draw(stage.get("config_type"), str(strategy)):
            out[name] = key
    return out


def draw_labels(sides: list[Mapping[int, Mapping[str, str]]], seeds: list[int]) -> tuple[list[int], list[str]]:
    """(a label per seed of ``seeds``: seeds that share a draw on any side share a label; the names of the stages
    drawn once for several of these seeds). ``sides``: each compared system's seed -> {stage name: key} of its
    random-draw stages (:func:`seed_draws`). A stage that another side ran with the same key (the base model's
    knowledge probe) is common ground of the comparison, not one system's draw: it is not counted."""
    parent = list(range(len(seeds)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    every = [{(name, key) for stages in side.values() for name, key in (stages or {}).items()} for side in sides]
    shared: dict[str, None] = {}
    for number, side in enumerate(sides):
        common = set().union(*(found for other, found in enumerate(every) if other != number))
        owners: dict[tuple[str, str], list[int]] = {}
        for i, seed in enumerate(seeds):
            for name, key in (side.get(seed) or {}).items():
                if (name, key) not in common:  # a stage both systems ran alike (the base model's probe) is common
                    owners.setdefault((name, key), []).append(i)
        for (name, _), members in owners.items():
            if len(members) > 1:
                shared[name] = None
                for other in members[1:]:
                    parent[root(other)] = root(members[0])
    roots = [root(i) for i in range(len(seeds))]
    order = {r: n for n, r in enumerate(dict.fromkeys(roots))}
    return [order[r] for r in roots], list(shared)


def stages_text(names: list[str]) -> str:
    """``kimera-retrain``; ``mop-partition and mop-adapter-0``; ``mop-partition and 4 more stages``."""
    if len(names) <= 2:
        return " and ".join(names)
    return f"{names[0]} and {len(names) - 1} more stages"


def conditional_text(names: list[str], draws: int = 1) -> str:
    """What a verdict over shared draws is conditional on: ``conditional on one kimera-retrain`` (``on these 3
    draws of ...`` where the interval kind does not model several)."""
    return f"conditional on {'one' if draws == 1 else f'these {draws} draws of'} {stages_text(names)}"


def draws_text(names: list[str], draws: int) -> str:
    """The seed part over several draws of shared stages: ``t over 3 draws of kimera-retrain``."""
    return f"t over {draws} draws of {stages_text(names)}"
