"""The mask-search stage (kimera-mask-hard / kimera-mask-soft): head importance and the iterative mask search on
the scoring set, each round's metric with a paired bootstrap interval against the unmasked round's, and a loud
warning when no head is redundant."""

from __future__ import annotations

import json
import logging

import numpy as np

from kinject.api import KinjectError, StageContext, load_task_model, load_tokenizer

from .importance import search_mask
from .masks import save_masks
from .scoring import ScoringSet, scoring_set
from .stages import MaskConfig

log = logging.getLogger("kinject")


def mask_body(cfg: MaskConfig, ctx: StageContext) -> None:
    """masks.json (the mask + the first-round ``importance``) and search.json (every round, the stop, warnings)."""
    scoring = cfg.scoring
    task, env = scoring.task.build(), scoring.task.environment(ctx)
    model_dir = cfg.finetuned_model.path if cfg.finetuned_model else ctx.inputs[cfg.model_stage] / "model"
    tokenizer = load_tokenizer(str(model_dir))
    head = task.head(env)
    model = load_task_model(model_dir, head, scoring.attn)
    chosen = scoring_set(scoring, task, env, tokenizer)

    def metric(logits) -> float:
        return task.score(scoring.split, chosen.examples, chosen.features, chosen.restore(logits), env)[scoring.metric]

    interval = RoundInterval(task, env, scoring.split, scoring.metric, chosen)
    result = search_mask(model, chosen.batches, head.problem_type, metric, cfg.rho, cfg.tau,
                         soft=cfg.kind == "soft", max_rounds=cfg.max_rounds, interval=interval,
                         metric_batches=chosen.metric_batches)
    save_masks(ctx.out / "masks.json", **{cfg.kind: result.mask, "importance": result.first_importance})
    threshold = cfg.tau * result.baseline
    warning = None
    if result.redundant == 0:
        warning = no_redundant_head_warning(cfg.kind, scoring.metric, result.rounds, threshold)
        log.warning("%s", warning)
    importance = sum(len(b["input_ids"]) for b in chosen.batches)
    summary = {"kind": cfg.kind, "metric": scoring.metric, "split": scoring.split, "examples": len(chosen.features),
               "importance_examples": importance,
               "units": next((r["units"] for r in result.rounds if "units" in r), None),
               "baseline": result.baseline, "tau": cfg.tau, "threshold": threshold, "rho": cfg.rho,
               "stopped": result.stopped, "rounds": result.rounds, "masked_heads": result.redundant,
               "heads": int(result.mask.numel()), "no_redundant_heads": result.redundant == 0, "warning": warning}
    (ctx.out / "search.json").write_text(json.dumps(summary, indent=2))


class RoundInterval:
    """``interval(baseline_logits, logits)`` for :func:`importance.search_mask`: the round's metric minus the
    unmasked round's, with a paired bootstrap interval over the scoring set's evaluation units (queries for
    retrieval, examples otherwise), computed by kinject.plugins.evidence from the task's per-example predictions.

    A task without per-example predictions, or a metric that cannot be recomputed from them, gives no
    interval (one warning, then None).
    """

    def __init__(self, task, env, split: str, metric: str, scoring: ScoringSet, resamples: int = 2000,
                 confidence: float = 0.95, seed: int = 0):
        self.task, self.env, self.split, self.metric, self.scoring = task, env, split, metric, scoring
        self.resamples, self.confidence, self.seed = resamples, confidence, seed
        self._baseline: list[dict] | None = None
        self.disabled = False

    def records(self, logits: np.ndarray) -> list[dict]:
        s = self.scoring
        return self.task.predictions(self.split, s.examples, s.features, s.restore(logits), self.env)

    def __call__(self, baseline_logits: np.ndarray, logits: np.ndarray) -> dict | None:
        if self.disabled:
            return None
        from kinject.plugins.evidence.compare import pair
        from kinject.plugins.evidence.metrics import define, task_metric_refs

        try:
            if self._baseline is None:
                self._baseline = self.records(baseline_logits)
            definition = define(self.metric, task_metric_refs(self.task), self.task.head(self.env).labels)
            _, row = pair(definition, {0: self._baseline}, [{0: self.records(logits)}], self.resamples,
                          self.confidence, self.seed)
        except (NotImplementedError, KinjectError, ValueError) as exc:
            log.warning("kimera mask search: no confidence interval for the rounds (%s)",
                        str(exc) or type(exc).__name__)
            self.disabled = True
            return None
        return {"difference": row["difference"], "ci_low": row["ci_low"], "ci_high": row["ci_high"],
                "confidence": self.confidence, "units": len(self._baseline)}


def no_redundant_head_warning(kind: str, metric: str, rounds: list[dict], threshold: float) -> str:
    """The loud message for a search that marked no head redundant (the retraining then moves no head)."""
    first = rounds[1] if len(rounds) > 1 else rounds[0]
    ci = (f", {first['difference']:+.4f} vs unmasked [95% CI {first['ci_low']:+.4f}, {first['ci_high']:+.4f}]"
          if "ci_low" in first else "")
    return (f"KIMERA mask search found NO redundant head: masking {first['masked']} head(s) in round "
            f"{first['round']} gave {metric}={first['metric']:.4f}{ci}, below the threshold {threshold:.4f}. "
            f"The {kind} mask freezes every attention head, so KG retraining changes only the non-attention "
            "parameters (other_params=train: FFN, embeddings, LayerNorms) and the new KG heads. Score more "
            "examples (strategy.score_examples, strategy.importance_examples), or lower strategy.tau or "
            "strategy.rho.")
