"""The mask-search stage (kimera-mask-hard / kimera-mask-soft): head importance and the iterative mask search on
the scoring set, each round's per-example predictions (for the rounds' intervals, which kimera-search-report
computes), and a loud warning when no head is redundant."""

from __future__ import annotations

import gzip
import json
import logging
import math
from pathlib import Path
from typing import Literal

import numpy as np

from kinject.api import KinjectError, ModelRef, StageConfig, StageContext, load_tokenizer
from kinject.training import load_task_model, plain

from .importance import search_mask
from .masks import save_masks
from .scoring import ScoringConfig, ScoringSet, scoring_set

log = logging.getLogger("kinject")

ROUND_PREDICTIONS = "round-predictions.jsonl.gz"  # one line per search round: {"round", "records"}
#: the share of heads a search masks, for its time estimate before it runs: the paper's CAPR mask (70.8 %); the
#: headline's HPO search masked 57 of 72 heads (79 %) and scored 17 rounds (docs/benchmarks.md)
EXPECTED_MASKED = 0.7


def expected_rounds(rho: float, max_rounds: int, rho_of: Literal["all", "active"] = "active") -> int:
    """Rounds a search is expected to score: round 0, the kept rounds that mask :data:`EXPECTED_MASKED` of the heads
    at ``rho`` a round (of the still-active heads or of all heads), and the round that fails."""
    if rho_of == "all":
        kept = math.ceil(EXPECTED_MASKED / rho)
    else:
        kept = math.ceil(math.log(1 - EXPECTED_MASKED) / math.log(1 - rho)) if rho < 1 else 1
    return min(max_rounds + 1, kept + 2)


class MaskConfig(StageConfig):
    """The iterative mask search on a fine-tuned task model."""

    kind: Literal["hard", "soft"]
    tau: float
    rho: float
    rho_of: Literal["all", "active"]
    max_rounds: int
    scoring: ScoringConfig
    finetuned_model: ModelRef | None = None  # a given task model instead of model_stage's
    model_stage: str | None = None  # the input stage whose model/ is scored (None: finetuned_model)

    def cost(self, run) -> float:
        return self.scoring.flops(run, expected_rounds(self.rho, self.max_rounds, self.rho_of))


def mask_body(cfg: MaskConfig, ctx: StageContext) -> None:
    """masks.json (the mask + the first-round ``importance``), search.json (every round, the stop, warnings) and
    the rounds' prediction records (:data:`ROUND_PREDICTIONS`, when the task gives per-example predictions)."""
    scoring = cfg.scoring
    task, env = scoring.task.build(), scoring.task.environment(ctx)
    model_dir = cfg.finetuned_model.path if cfg.finetuned_model else ctx.inputs[cfg.model_stage] / "model"
    tokenizer = load_tokenizer(str(model_dir))
    head = task.head(env)
    model = load_task_model(model_dir, head, scoring.attn)
    chosen = scoring_set(scoring, task, env, tokenizer)

    def metric(logits) -> float:
        return task.score(scoring.split, chosen.examples, chosen.features, chosen.restore(logits), env)[scoring.metric]

    predictions = RoundPredictions(task, env, scoring.split, chosen)
    result = search_mask(model, chosen.batches, head.problem_type, metric, cfg.rho, cfg.tau,
                         soft=cfg.kind == "soft", max_rounds=cfg.max_rounds, rho_of=cfg.rho_of, observe=predictions,
                         metric_batches=chosen.metric_batches, bf16=scoring.bf16)
    save_masks(ctx.out / "masks.json", **{cfg.kind: result.mask, "importance": result.first_importance})
    if predictions.rounds:
        write_round_predictions(ctx.out / ROUND_PREDICTIONS, predictions.rounds)
    threshold = cfg.tau * result.baseline
    warning = None
    if result.redundant == 0:
        warning = no_redundant_head_warning(cfg.kind, scoring.metric, result.rounds, threshold)
        log.warning("%s", warning)
    importance = sum(len(b["input_ids"]) for b in chosen.batches)
    summary = {"kind": cfg.kind, "metric": scoring.metric, "split": scoring.split, "examples": len(chosen.features),
               "importance_examples": importance,
               "units": len(predictions.rounds[0]) if predictions.rounds else None,
               "baseline": result.baseline, "tau": cfg.tau, "threshold": threshold, "rho": cfg.rho,
               "rho_of": cfg.rho_of, "stopped": result.stopped, "rounds": result.rounds,
               "masked_heads": result.redundant,
               "heads": int(result.mask.numel()), "no_redundant_heads": result.redundant == 0, "warning": warning}
    (ctx.out / "search.json").write_text(json.dumps(summary, indent=2))


class RoundPredictions:
    """``observe(round, logits)`` for :func:`importance.search_mask`: each round's per-example prediction records
    on the scoring set (``task.predictions``: one per evaluation unit, a query for retrieval), in ``rounds``.

    A task without per-example predictions gives none (one warning: the rounds get no confidence interval)."""

    def __init__(self, task, env, split: str, scoring: ScoringSet):
        self.task, self.env, self.split, self.scoring = task, env, split, scoring
        self.rounds: list[list[dict]] = []
        self.disabled = False

    def __call__(self, round_no: int, logits: np.ndarray) -> None:
        if self.disabled:
            return
        s = self.scoring
        try:
            records = plain(self.task.predictions(self.split, s.examples, s.features, s.restore(logits), self.env))
        except (NotImplementedError, KinjectError, ValueError) as exc:
            log.warning("kimera mask search: no confidence interval for the rounds (%s)",
                        str(exc) or type(exc).__name__)
            self.disabled, self.rounds = True, []
            return
        self.rounds.append(records)


def write_round_predictions(path: Path, rounds: list[list[dict]]) -> None:
    """Every round's records, gzipped JSON lines (no timestamp in the header: same rounds, same bytes)."""
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as handle:
        for round_no, records in enumerate(rounds):
            handle.write((json.dumps({"round": round_no, "records": records}) + "\n").encode("utf-8"))


def read_round_predictions(path: Path) -> list[list[dict]]:
    """The records of :func:`write_round_predictions`, round 0 first ([] when the file does not exist)."""
    if not Path(path).exists():
        return []
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line)["records"] for line in handle if line.strip()]


def no_redundant_head_warning(kind: str, metric: str, rounds: list[dict], threshold: float) -> str:
    """The loud message for a search that marked no head redundant (the retraining then moves no head); with round
    1's interval when its record has one (kimera-search-report)."""
    first = rounds[1] if len(rounds) > 1 else rounds[0]
    ci = (f", {first['difference']:+.4f} vs unmasked [95% CI {first['ci_low']:+.4f}, {first['ci_high']:+.4f}]"
          if "ci_low" in first else "")
    return (f"KIMERA mask search found NO redundant head: masking {first['masked']} head(s) in round "
            f"{first['round']} gave {metric}={first['metric']:.4f}{ci}, below the threshold {threshold:.4f}. "
            f"The {kind} mask freezes every attention head, so KG retraining changes only the non-attention "
            "parameters (other_params=train: FFN, embeddings, LayerNorms) and the new KG heads. Score more "
            "examples (strategy.score_examples, strategy.importance_examples), or lower strategy.tau or "
            "strategy.rho.")
