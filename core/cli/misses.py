"""Why a stage misses the cache, as `kinject run --dry-run` says it: the fewest differences between the stage's
record (what its key hashes) and the record of any cached run of the same stage."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def record_differences(old: dict, new: dict, modules: dict[str, list[str]] | None = None) -> list[str]:
    """What differs between two stage records, as short human-readable items (``modules``: where the new record's
    definitions are, to name them)."""
    diffs = []
    a, b = _flatten(old.get("config", {})), _flatten(new.get("config", {}))
    for name in sorted(set(a) | set(b)):
        if a.get(name, "<unset>") != b.get(name, "<unset>"):
            diffs.append(f"{name}: {a.get(name, '<unset>')!r} -> {b.get(name, '<unset>')!r}")
    code_a, code_b = old.get("code", {}), new.get("code", {})
    changed = sorted(m for m in set(code_a) | set(code_b) if code_a.get(m) != code_b.get(m))
    if changed:
        where = {name: module for module, names in (modules or {}).items() for name in names}
        shown = [f"{name} ({where[name]})" if name in where else name for name in changed[:4]]
        diffs.append("code changed: " + ", ".join(shown) + (f" and {len(changed) - 4} more" if len(changed) > 4
                                                             else ""))
    for name in sorted(set(old.get("inputs", {})) | set(new.get("inputs", {}))):
        if old.get("inputs", {}).get(name) != new.get("inputs", {}).get(name):
            diffs.append(f"input {name} changed")
    for name in sorted(set(old.get("libraries", {})) | set(new.get("libraries", {}))):
        if old.get("libraries", {}).get(name) != new.get("libraries", {}).get(name):
            diffs.append(f"{name} {old.get('libraries', {}).get(name)} -> {new['libraries'].get(name)}")
    for name in ("config_type", "body", "contract"):
        if old.get(name) != new.get(name):
            diffs.append(f"{name}: {old.get(name)} -> {new.get(name)}")
    return diffs


def explain_miss(planned: Any, cache_dir: Path) -> str:
    """Why a stage is not cached: the fewest differences to any cached run of the same stage."""
    from kinject.cache import read_stage_info

    best: list[str] | None = None
    for path in (Path(cache_dir) / "stages" / planned.stage.name).glob("*/stage.json"):
        old = (read_stage_info(path.parent) or {}).get("record")  # a damaged stage.json tells nothing
        if not isinstance(old, dict) or not old:
            continue
        diffs = record_differences(old, planned.record, planned.code_modules)
        if diffs and (best is None or len(diffs) < len(best)):
            best = diffs
    return "; ".join(best) if best else "never run with this cache"


