"""Engine overhead: (1) a cached no-op stage (key hashing, cache lookup, hooks) per stage, and (2) a whole
`finetune` run through the engine vs calling kinject.training.train directly on the same tiny model and data.

Usage: .venv/bin/python -m benchmarks.bench_engine_overhead
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("KINJECT_PROGRESS", "0")

from benchmarks.common import write_textcls  # noqa: E402
from kinject.api import Stage, StageConfig, Strategy  # noqa: E402


class NoOpConfig(StageConfig):
    i: int


def noop_body(cfg, ctx) -> None:
    (ctx.out / "done").write_text(str(cfg.i))


class NoOp(Strategy):
    """Ten chained no-op stages."""

    def stages(self, run):
        return [Stage(name=f"noop{i}", body=noop_body, config=NoOpConfig(i=i), inputs=(f"noop{i - 1}",) if i else ())
                for i in range(10)]


def main() -> None:
    from kinject import engine, preparation
    from kinject.api import registry
    from kinject.stage_runner import run_stages
    from kinject.spec_reading import build_spec

    registry("strategies").register("noop", NoOp)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = write_textcls(tmp / "data", n_train=256, n_eval=32)
        spec = build_spec({"task": {"name": "textcls", "path": str(data)}, "strategy": {"name": "noop"},
                           "model": {"name": "tiny"}, "cache_dir": str(tmp / "cache")})
        engine.execute(preparation.prepare(spec), tmp / "warm")  # fills the cache
        per_stage = []
        for _ in range(5):
            run = preparation.prepare(spec)
            start = time.perf_counter()
            results = run_stages(run)  # plan, keys, verified hits, hooks
            per_stage.append((time.perf_counter() - start) / len(results))
            assert all(cached for _, cached, _ in results)
        print(f"cached no-op stage: median {statistics.median(per_stage) * 1e3:.2f} ms per stage "
              "(plan + key + verified lookup + hooks)")

        # whole finetune through the engine vs training directly
        from kinject.api import resolve_model
        from kinject.training import build_task_model
        from kinject.api import load_tokenizer
        from kinject.training import train

        ft = build_spec({"task": {"name": "textcls", "path": str(data)}, "model": {"name": "tiny"},
                         "training": {"epochs": 3}, "cache_dir": str(tmp / "cache2")})
        engine_times, direct_times = [], []
        for r in range(3):
            spec_r = ft.model_copy(update={"cache_dir": tmp / f"cache-e{r}"})
            start = time.perf_counter()
            engine.execute(preparation.prepare(spec_r), tmp / f"run{r}")
            engine_times.append(time.perf_counter() - start)
            start = time.perf_counter()
            run = preparation.prepare(spec_r)
            tok = load_tokenizer(resolve_model("tiny", run.env.cache_dir))
            task = run.task
            model = build_task_model(run.model_path, task.head(run.env), seed=0)
            feats = task.featurize(tok, task.examples("train", run.env), 128, run.env)
            train(model, feats, task.collator(tok), ft.training, tmp / f"direct{r}", 0)
            direct_times.append(time.perf_counter() - start)
        e, d = statistics.median(engine_times), statistics.median(direct_times)
        print(f"finetune via engine (train + save + evaluate dev/test + run dir): {e:.2f} s; "
              f"train() directly: {d:.2f} s; difference {e - d:.2f} s (includes evaluation and saving)")


if __name__ == "__main__":
    main()
