"""The DoKTra report: metrics of the student, the fine-tuned student and the teacher side by side, ECE of each
(from the per-example prediction records the evaluate stages wrote), the share of the teacher's score the
students retain (the paper's Table 2 "Retain"), L_AT, and reliability diagrams.

Calibration of a single-label prediction: confidence = max softmax probability, correct = argmax is the gold
label. Multi-label: every (unit, label) decision is one binary prediction - confidence = max(p, 1 - p) of
the label's sigmoid, correct = (p >= 0.5) agrees with the gold set.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np

from kinject.api import StageConfig, StageContext, TaskRef, is_main_process

log = logging.getLogger("kinject")
ROLES = {"student_ft": "fine-tuned student", "teacher": "teacher"}  # "student": the variant's student


def confidence_and_correct(records: list[dict], labels: list[str], problem_type: str,
                           threshold: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Per-decision confidence and correctness of prediction records (``gold``, ``scores`` = logits)."""
    scores = np.asarray([r["scores"] for r in records], dtype=float).reshape(len(records), -1)
    if problem_type == "multi_label_classification":
        p = 1 / (1 + np.exp(-scores))
        gold = np.asarray([[label in r["gold"] for label in labels] for r in records], dtype=bool)
        return np.maximum(p, 1 - p).ravel(), ((p >= threshold) == gold).ravel()
    z = np.exp(scores - scores.max(axis=1, keepdims=True))
    probs = z / z.sum(axis=1, keepdims=True)
    index = {name: j for j, name in enumerate(labels)}
    gold = np.asarray([index.get(str(r["gold"]), -1) for r in records])
    return probs.max(axis=1), probs.argmax(axis=1) == gold


def reliability_diagram(curves: dict[str, tuple[np.ndarray, np.ndarray, float]], bins: int, title: str,
                        path: Path, names: dict[str, str] | None = None) -> None:
    """Accuracy vs confidence per equal-width bin for each model (top) and how many decisions fall in each
    bin (bottom); the legend carries each model's ECE."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.calibration import calibration_curve

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(5.5, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    top.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1, label="perfect calibration")
    edges, names = np.linspace(0, 1, bins + 1), {**ROLES, **(names or {})}
    for role, (confidence, correct, ece) in curves.items():
        accuracy, mean_confidence = calibration_curve(correct.astype(int), confidence, n_bins=bins, strategy="uniform")
        top.plot(mean_confidence, accuracy, marker="o", markersize=3, label=f"{names.get(role, role)} (ECE {ece:.3f})")
        counts, _ = np.histogram(confidence, bins=edges)
        bottom.step(edges[:-1], counts, where="post", label=names.get(role, role))
    top.set(ylabel="accuracy", title=title, xlim=(0, 1), ylim=(0, 1))
    top.legend(fontsize=8, loc="upper left")
    bottom.set(xlabel="confidence", ylabel="decisions", yscale="log")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _read(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def retained(student: dict, teacher: dict, metric: str) -> float | None:
    """100 x student / teacher on ``metric`` (None when undefined)."""
    s, t = student.get(metric), teacher.get(metric)
    if not isinstance(s, (int, float)) or not isinstance(t, (int, float)) or not t or math.isnan(t):
        return None
    return 100.0 * s / t


def write_report(out: Path, task, env, folders: dict[str, Path], metric: str, bins: int, variant: str,
                 distill: Path | None) -> dict:
    """metrics.json, calibration.json and plots/reliability-<split>.png into ``out``. Per split: the student's
    metrics, ``ece``, the same for the teacher and the fine-tuned student (``teacher/<metric>``,
    ``student_ft/<metric>``) and ``retained/<student|student_ft>`` (% of the teacher's ``metric``)."""
    from kinject.tasks import expected_calibration_error
    from kinject.tasks import read_jsonl

    head = task.head(env)
    per_role = {role: _read(folder / "metrics.json") for role, folder in folders.items()}
    curves: dict[str, dict] = {}
    for role, folder in folders.items():
        for split in [s for s in per_role[role] if s != "train"]:
            path = folder / "predictions" / f"{split}.jsonl"
            if not path.exists():
                log.warning("doktra report: %s has no %s predictions; no ECE", role, split)
                continue
            confidence, correct = confidence_and_correct([row for _, row in read_jsonl(path)], list(head.labels),
                                                         head.problem_type)
            ece = expected_calibration_error(confidence, correct, bins)
            per_role[role][split]["ece"] = ece
            curves.setdefault(split, {})[role] = (confidence, correct, ece)
    metrics = dict(per_role["student"])
    for split in [s for s in metrics if s != "train"]:
        for role in ("teacher", "student_ft"):
            metrics[split].update({f"{role}/{k}": v for k, v in per_role.get(role, {}).get(split, {}).items()})
        if "teacher" in per_role:
            teacher = per_role["teacher"].get(split, {})
            metrics[split].update({f"retained/{role}": retained(per_role[role].get(split, {}), teacher, metric)
                                   for role in ("student", "student_ft")})
    if distill is not None and distill.exists():
        metrics["l_at"] = json.loads(distill.read_text()).get("l_at")
    metrics["doktra"] = {"variant": variant, "metric": metric, "ece_bins": bins}
    for split, by_role in curves.items():
        reliability_diagram(by_role, bins, f"{task.name} {split}: reliability ({bins} bins)",
                            out / "plots" / f"reliability-{split}.png", {"student": f"student ({variant})"})
    calibration = {split: {role: {"ece": ece, "decisions": int(len(c)), "accuracy": float(np.mean(k)),
                                  "mean_confidence": float(np.mean(c))} for role, (c, k, ece) in by_role.items()}
                   for split, by_role in curves.items()}
    (out / "calibration.json").write_text(json.dumps(calibration, indent=2))
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    return metrics


class ReportConfig(StageConfig):
    """Student, fine-tuned student and teacher side by side: task metrics, ECE, % of the teacher retained,
    L_AT before/after distillation; reliability diagrams."""

    task: TaskRef
    variant: str
    metric: str
    bins: int
    final: str  # the evaluation of the variant's student
    baseline: str  # the evaluation of the fine-tuned student
    teacher: str | None = None  # the teacher's evaluation (None: the run has no teacher)
    distill: str | None = None  # the distillation stage, for L_AT (None: cp-only)


def report_body(cfg: ReportConfig, ctx: StageContext) -> None:
    task, env = cfg.task.build(), cfg.task.environment(ctx)
    roles = {"student": cfg.final, "student_ft": cfg.baseline, "teacher": cfg.teacher}
    folders = {role: ctx.inputs[stage] for role, stage in roles.items() if stage}
    distill = ctx.inputs[cfg.distill] / "train.json" if cfg.distill else None
    if is_main_process():
        write_report(ctx.out, task, env, folders, cfg.metric, cfg.bins, cfg.variant, distill)
