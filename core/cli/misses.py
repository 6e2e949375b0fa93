"""Why a stage misses the cache, as `kinject run --dry-run` says it: the one or two reasons that matter.

A stage this cache holds an interrupted run of says so first (and whether ``--resume`` has a checkpoint to continue
from). Otherwise the stage's record (what its key hashes) is compared with the record of the closest cached run of
the same stage (the fewest differences), and the differences are told by what they concern, the weightiest first:
another task or data, another model, changed inputs, changed code, other training settings, other settings, other
library versions; each kind in one short item, at most two kinds, then how many more differ.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

SHOWN = 2  # kinds of difference told
WIDTH = 40  # characters of a value shown
#: kinds of difference, weightiest first: (name, how a config key of that kind starts)
KINDS = (("task", ("task",)), ("model", ("model",)), ("inputs", ()), ("code", ()), ("training", ("training",)),
         ("settings", ()), ("libraries", ()))


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= WIDTH else text[:WIDTH - 3] + "..."


def _kind(key: str) -> str:
    for name, starts in KINDS:
        if any(key == s or key.startswith(s + ".") or f".{s}." in f".{key}" for s in starts):
            return name
    return "settings"


def record_differences(old: dict, new: dict, modules: dict[str, list[str]] | None = None) -> list[tuple[str, str]]:
    """What differs between two stage records: (kind, short item) pairs (``modules``: where the new record's
    definitions are, to name them)."""
    diffs = []
    a, b = _flatten(old.get("config", {})), _flatten(new.get("config", {}))
    for name in sorted(set(a) | set(b)):
        if a.get(name, "<unset>") != b.get(name, "<unset>"):
            diffs.append((_kind(name), f"{name}: {_short(a.get(name, '<unset>'))} -> {_short(b.get(name, '<unset>'))}"))
    code_a, code_b = old.get("code", {}), new.get("code", {})
    changed = sorted(m for m in set(code_a) | set(code_b) if code_a.get(m) != code_b.get(m))
    where = {name: module for module, names in (modules or {}).items() for name in names}
    for name in changed:
        diffs.append(("code", f"{name} ({where[name]})" if name in where else name))
    for name in sorted(set(old.get("inputs", {})) | set(new.get("inputs", {}))):
        if old.get("inputs", {}).get(name) != new.get("inputs", {}).get(name):
            diffs.append(("inputs", f"input {name} changed"))
    for name in sorted(set(old.get("libraries", {})) | set(new.get("libraries", {}))):
        if old.get("libraries", {}).get(name) != new.get("libraries", {}).get(name):
            diffs.append(("libraries", f"{name} {old.get('libraries', {}).get(name)} -> "
                                       f"{new.get('libraries', {}).get(name)}"))
    for name in ("config_type", "body", "contract"):
        if old.get(name) != new.get(name):
            diffs.append(("code", f"{name} {_short(old.get(name))} -> {_short(new.get(name))}"))
    return diffs


def summarise(diffs: list[tuple[str, str]]) -> str:
    """The weightiest :data:`SHOWN` kinds of difference, one item each, and how many more differences there are."""
    order = [name for name, _ in KINDS]
    kinds = sorted({kind for kind, _ in diffs}, key=order.index)
    parts, told = [], 0
    for kind in kinds[:SHOWN]:
        items = [item for k, item in diffs if k == kind]
        told += len(items)
        if kind == "code":  # by module: "code changed in kinject.x (3 definitions), kinject.y"
            where: dict[str, int] = {}
            for item in items:
                found = re.search(r"\((\S+)\)$", item)
                module = found.group(1) if found else item
                where[module] = where.get(module, 0) + 1
            shown = [f"{m} ({n} definitions)" if n > 1 else m for m, n in list(where.items())[:2]]
            parts.append("code changed in " + ", ".join(shown) + (f" and {len(where) - 2} more modules"
                                                                  if len(where) > 2 else ""))
        else:
            noun = {"inputs": "input(s)", "libraries": "library version(s)"}.get(kind, f"{kind} setting(s)")
            parts.append(items[0] + (f" (and {len(items) - 1} more {noun})" if len(items) > 1 else ""))
    rest = len(diffs) - told
    return "; ".join(parts) + (f"; {rest} more difference(s)" if rest > 0 else "")


def _interrupted(folder: Path) -> str | None:
    """What an interrupted run of this very key left (None: nothing)."""
    from kinject.cache import partial_path

    partial = partial_path(folder)
    if not partial.is_dir():
        return None
    steps = sorted(int(m.group(1)) for p in (partial / "work").glob("checkpoint-*")
                   if (m := re.fullmatch(r"checkpoint-(\d+)", p.name)))
    if steps:
        return f"an interrupted run of it is kept: --resume continues from its step {steps[-1]}"
    return "an interrupted run of it left no checkpoint: it starts again"


def explain_miss(planned: Any, cache_dir: Path) -> str:
    """Why a stage is not cached: an interrupted run of it, else the weightiest differences to the closest cached
    run of the same stage."""
    from kinject.cli.estimate import STAGE_BYTES, read_record

    interrupted = _interrupted(planned.folder)
    if interrupted:
        return interrupted
    best: list[tuple[str, str]] | None = None
    for path in sorted((Path(cache_dir) / "stages" / planned.stage.name).glob("*/stage.json")):
        old = (read_record(path, STAGE_BYTES, "not compared") or {}).get("record")
        if not isinstance(old, dict):
            continue
        diffs = record_differences(old, planned.record, planned.code_modules)
        if diffs and (best is None or len(diffs) < len(best)):
            best = diffs
    return summarise(best) if best else "never run with this cache"
