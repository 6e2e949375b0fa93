"""Run directories built by hand for the evidence tests (imported as ``from evidence_runs import ...``)."""

from __future__ import annotations

import json
from pathlib import Path


def make_run(folder: Path, records: list[dict], *, task: dict | None = None, seed: int = 42, split: str = "test",
             metrics: dict | None = None, labels: tuple[str, ...] = ("bio", "other"), strategy: str = "finetune",
             model: str = "tiny", stages: list[tuple[str, str, str]] | None = None,
             training: dict | None = None) -> Path:
    """A run directory as ``kinject run`` writes it: run.json (``stages``: (name, key, config type) records),
    metrics.json, predictions/<split>.jsonl and model/config.json (the head's id2label)."""
    folder.mkdir(parents=True, exist_ok=True)
    task = task or {"name": "textcls", "path": "/nowhere"}
    spec = {"model": {"name": model}, "task": task, "strategy": {"name": strategy}, "sources": [],
            "training": training or {"epochs": 1.0}, "seed": seed}
    stage_records = [{"name": name, "key": key, "cached": False, "seconds": 1.0, "dir": f"/cache/{name}/{key}",
                "config_type": config_type} for name, key, config_type in stages or []]
    info = {"spec": spec, "command": ["kinject", "run", strategy, "--task", task["name"], "--seed", str(seed)],
            "stages": stage_records, "versions": {"kinject": "0.1.0", "torch": "2.x"}, "git_sha": "abc123", "seed": seed,
            "data": f"{task['name']}:/nowhere", "model_path": model, "created": "2026-01-01T00:00:00+0000"}
    (folder / "run.json").write_text(json.dumps(info))
    (folder / "metrics.json").write_text(json.dumps(metrics or {}))
    (folder / "predictions").mkdir(exist_ok=True)
    (folder / "predictions" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "model").mkdir(exist_ok=True)
    (folder / "model" / "config.json").write_text(json.dumps({"id2label": {str(i): x for i, x in enumerate(labels)}}))
    return folder


def classification_records(n: int, correct: int, offset: int = 0) -> list[dict]:
    """``n`` examples (gold bio/other alternating); the first ``correct`` after ``offset`` are predicted right."""
    out = []
    for i in range(n):
        gold = "bio" if i % 2 == 0 else "other"
        right = offset <= i < offset + correct
        pred = gold if right else ("other" if gold == "bio" else "bio")
        scores = [0.1, 0.2] if pred == "other" else [0.2, 0.1]
        out.append({"id": f"test-{i}", "gold": gold, "pred": pred, "scores": scores})
    return out


def accuracy(records: list[dict]) -> float:
    return sum(r["gold"] == r["pred"] for r in records) / len(records)


def brier_evaluator():
    """A third party's evaluator needing the scores: the macro Brier score of softmax probabilities (lower is
    better; it refuses to run without the scores)."""
    import numpy as np

    from kinject.api import Evaluator, PluginConfig

    class Brier(Evaluator):
        """Macro Brier score of softmax probabilities (lower is better)."""

        needs = ("scores",)

        class Config(PluginConfig):
            pass

        def metric_names(self):
            return ["brier_macro"]

        def compute(self, references, predictions, scores=None, labels=None, **kwargs):
            if scores is None:
                raise ValueError(f"brier needs the logits; got {sorted(kwargs)}")
            s = np.asarray(scores, dtype=float)
            p = np.exp(s) / np.exp(s).sum(axis=1, keepdims=True)
            y = np.array([[r == label for label in labels] for r in references], dtype=float)
            return {"brier_macro": float(((p - y) ** 2).mean())}

    return Brier


FINETUNE_CONFIG = "kinject.training.stages.FinetuneConfig"
RETRAIN_CONFIG = "kinject.plugins.kimera.retrain.RetrainConfig"
GIVEN_MASK_CONFIG = "kinject.plugins.kimera.masks.GivenMaskConfig"


def seeded_pair(root: Path, base_correct: dict[int, int], arm_correct: dict[int, int], retrain_keys: dict[int, str],
                n: int = 200, extra: tuple[str, str, str] | None = None) -> tuple[Path, Path]:
    """A finetune baseline and a KIMERA-like arm (``root/finetune``, ``root/kimera``), one seed folder each per
    seed: each seed's fine-tune stage keyed by its seed, the arm's ``kimera-retrain`` keyed ``retrain_keys[seed]``
    (the same key for seeds that share one retraining); ``extra``: one more arm stage, the same for every seed."""
    for seed, correct in base_correct.items():
        make_run(root / "finetune" / f"seed-{seed}", classification_records(n, correct), seed=seed,
                 stages=[("finetune", f"ft-{seed}", FINETUNE_CONFIG)])
    for seed, correct in arm_correct.items():
        stages = [("finetune", f"ft-{seed}", FINETUNE_CONFIG), ("kimera-retrain", retrain_keys[seed], RETRAIN_CONFIG),
                  ("kimera-finetune", f"kft-{seed}", FINETUNE_CONFIG), *([extra] if extra else [])]
        make_run(root / "kimera" / f"seed-{seed}", classification_records(n, correct, offset=seed % 7), seed=seed,
                 strategy="kimera", stages=stages)
    return root / "finetune", root / "kimera"
