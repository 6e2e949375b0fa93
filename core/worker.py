"""Run one stage body in a fresh single-process Python (``python -m kinject.worker``; JSON on stdin).

Used by the engine for ``Stage.spread`` stages under torchrun / accelerate launch: each process of the
launch runs its share of the stages, each in a worker that sees no distributed environment, so trainers
inside the body train alone. The body and its config class are imported by name; the config is rebuilt
from JSON, so the worker sees exactly what the key holds.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path


DISTRIBUTED_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                         "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
                         "ACCELERATE_USE_CPU", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS")


def _load(ref: str):
    module, _, qualname = ref.partition(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def job(stage, ctx) -> dict:
    """What a worker needs to run ``stage`` with ``ctx`` (JSON-serialisable)."""
    body, config = stage.body, stage.config
    return {"body": f"{body.__module__}:{body.__qualname__}",
            "config_type": f"{type(config).__module__}:{type(config).__qualname__}",
            "config": config.model_dump(mode="json"),
            "ctx": {"name": ctx.name, "key": ctx.key, "out": str(ctx.out), "work": str(ctx.work),
                    "inputs": {k: str(v) for k, v in ctx.inputs.items()}, "resume": ctx.resume,
                    "cache_dir": str(ctx.cache_dir), "offline": ctx.offline}}


def main() -> None:
    import logging

    from kinject.interfaces import StageContext

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    spec = json.loads(sys.stdin.read())
    config = _load(spec["config_type"]).model_validate(spec["config"])
    c = spec["ctx"]
    ctx = StageContext(name=c["name"], key=c["key"], out=Path(c["out"]), work=Path(c["work"]),
                       inputs={k: Path(v) for k, v in c["inputs"].items()}, resume=c["resume"],
                       cache_dir=Path(c["cache_dir"]), offline=c["offline"])
    _load(spec["body"])(config, ctx)


if __name__ == "__main__":
    main()
