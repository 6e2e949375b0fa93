"""The report stage (kimera-report, paper section 5): I_h of the KIMERA task model against the mask and the
first-round I_h, as heatmaps, the mean I_h of retrained vs frozen heads (table 3) and per-layer counts of heads
whose importance rose or fell. The only module that plots (matplotlib, imported when a plot is drawn)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import torch

from kinject.api import StageConfig, StageContext, load_tokenizer
from kinject.training import load_task_model

from .importance import normalize_importance, score_heads
from .masks import load_mask
from .scoring import ScoringConfig, scoring_set


class ReportConfig(StageConfig):
    """Head importance of the final model against the mask and the first-round importance."""

    kind: Literal["hard", "soft"]
    scoring: ScoringConfig
    mask_stage: str  # the input stage whose masks.json holds the mask and the first-round importance
    model_stage: str  # the input stage whose model/ (the KIMERA task model) is scored

    def cost(self, run) -> float:
        return self.scoring.flops(run, 1, metric=False)  # importance only: the metric is not scored


def report_body(cfg: ReportConfig, ctx: StageContext) -> None:
    """plots/*.png and analysis.json: the final model's I_h on the mask search's scoring set."""
    scoring = cfg.scoring
    task, env = scoring.task.build(), scoring.task.environment(ctx)
    model_dir = ctx.inputs[cfg.model_stage] / "model"
    tokenizer = load_tokenizer(str(model_dir))
    head = task.head(env)
    model = load_task_model(model_dir, head, scoring.attn)
    raw, _ = score_heads(model, scoring_set(scoring, task, env, tokenizer).batches, head.problem_type,
                         bf16=scoring.bf16)
    masks_file = ctx.inputs[cfg.mask_stage] / "masks.json"
    mask = load_mask(masks_file, cfg.kind)
    before = load_mask(masks_file, "importance", tuple(mask.shape))
    write_analysis(ctx.out, mask, before, normalize_importance(raw), cfg.kind)


def importance_table(mask: torch.Tensor, before: torch.Tensor, after: torch.Tensor) -> dict:
    """Table 3 and figure 3 numbers. Retrained heads: m < 1 (their updates were not zero)."""
    retrained = mask < 1

    def mean(values: torch.Tensor, where: torch.Tensor) -> float | None:
        return float(values[where].mean()) if bool(where.any()) else None

    table = {"frozen": {"heads": int((~retrained).sum()), "before": mean(before, ~retrained),
                        "after": mean(after, ~retrained)},
             "retrained": {"heads": int(retrained.sum()), "before": mean(before, retrained),
                           "after": mean(after, retrained)}}
    per_layer = []
    rose, fell = after > before, after < before
    for layer in range(mask.shape[0]):
        r, f = retrained[layer], ~retrained[layer]
        per_layer.append({
            "layer": layer, "mean_before": float(before[layer].mean()), "mean_after": float(after[layer].mean()),
            "retrained_rose": int((rose[layer] & r).sum()), "retrained_fell": int((fell[layer] & r).sum()),
            "frozen_rose": int((rose[layer] & f).sum()), "frozen_fell": int((fell[layer] & f).sum())})
    return {"table3": table, "per_layer": per_layer}


def heatmap(values: torch.Tensor, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(5.5, 1 + 0.45 * values.shape[1]), 1.4 + 0.4 * values.shape[0]))
    image = ax.imshow(values.numpy(), vmin=0, vmax=1, cmap="viridis", aspect="auto")  # one scale for every map
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks(range(values.shape[1]))
    ax.set_yticks(range(values.shape[0]))
    ax.set_title(title, fontsize=9, wrap=True)
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def bars_figure(table: dict):
    """Figure 3: per layer, mean I_h before/after and counts of retrained/frozen heads whose I_h rose/fell; each
    before/after (rose/fell) pair centred on its integer layer tick, every panel's y axis labelled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    rows = table["per_layer"]
    layers = [r["layer"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
    width = 0.4
    panels = ((axes[0], "mean_before", "mean_after", "before", "after", "mean I_h per layer", "mean I_h"),
              *((ax, f"{group}_rose", f"{group}_fell", "rose", "fell", f"{group} heads: importance rose / fell",
                 f"{group} heads (count)") for ax, group in ((axes[1], "retrained"), (axes[2], "frozen"))))
    for ax, left, right, left_label, right_label, title, ylabel in panels:
        ax.bar([x - width / 2 for x in layers], [r[left] for r in rows], width, label=left_label)
        ax.bar([x + width / 2 for x in layers], [r[right] for r in rows], width, label=right_label)
        ax.set_title(title)
        ax.set_xlabel("layer")
        ax.set_ylabel(ylabel)
        ax.set_xticks(layers[::max(1, -(-len(layers) // 16))])  # integer layers, at most 16 labels
        ax.set_xlim(min(layers, default=0) - 0.5, max(layers, default=0) + 0.5)
        ax.legend()
    for ax in axes[1:]:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts of heads
    fig.tight_layout()
    return fig


def bars(table: dict, path: Path) -> None:
    fig = bars_figure(table)  # selects the Agg backend before pyplot is imported here
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_analysis(out: Path, mask: torch.Tensor, before: torch.Tensor, after: torch.Tensor, kind: str) -> dict:
    """Write plots/*.png and analysis.json into ``out``; returns the tables."""
    out = Path(out)
    plots = out / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    heatmap(mask, f"{kind} mask (1 = important, frozen)", plots / "1-mask.png")  # names sort in reading order
    heatmap(before, "I_h before KIMERA (fine-tuned base model)", plots / "2-importance-before.png")
    heatmap(after, "I_h after KIMERA", plots / "3-importance-after.png")
    table = importance_table(mask, before, after)
    bars(table, plots / "4-importance-per-layer.png")
    table.update({"mask_kind": kind, "mask": mask.tolist(), "importance_before": before.tolist(),
                  "importance_after": after.tolist()})
    (out / "analysis.json").write_text(json.dumps(table, indent=1))
    return table
