"""MoP's report stage (``mop-report``), its config and its artifacts: per-partition adapter entity prediction on
held-out triples (kinject's diagnostic of what each adapter learned; the paper's Fig. 2 is downstream, each adapter
alone: adapters_used=[i]) and the mixture weights over partitions of the last layer's [CLS] per evaluation example
(the paper's Fig. 4, middle), as JSON and PNG."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from pydantic import Field

from kinject.api import NOT_KEYED, Environment, StageConfig, StageContext, Task, TaskRef, is_main_process
from kinject.api import load_tokenizer


class ReportConfig(StageConfig):
    task: TaskRef
    model_stage: str
    adapters: list[str]
    split: str
    examples: int
    max_length: int
    attn_implementation: str = "sdpa"
    batch_size: int = Field(64, json_schema_extra=NOT_KEYED)


def adapter_summary(stats: list[dict]) -> dict:
    """One row per partition adapter plus means, from each adapter stage's adapter.json."""
    rows = [{k: s.get(k) for k in ("part", "entities", "classes", "train_rows", "heldout_rows", "heldout",
                                     "heldout_prior", "entity_head", "train_probe", "train_probe_prior",
                                     "train_loss", "useful_token_fraction", "train_seconds", "base_unchanged")}
            for s in stats]
    scored = [r for r in rows if r["heldout"] and r["heldout"]["n"]]
    acc = [r["heldout"]["accuracy@1"] for r in scored]
    prior = [r["heldout_prior"]["accuracy@1"] for r in scored if r.get("heldout_prior")]
    probed = [r for r in rows if r.get("train_probe") and r["train_probe"]["n"]]

    def mean(values: list) -> float | None:
        return float(np.mean(values)) if values else None

    return {"parts": rows, "mean_heldout_accuracy@1": mean(acc),
            # the same, answering the most frequent training tail for every input (no knowledge of the head)
            "mean_heldout_prior_accuracy@1": mean(prior),
            # facts stored: accuracy on the adapters' own training rows, and the prior's there
            "mean_train_probe_accuracy@1": mean([r["train_probe"]["accuracy@1"] for r in probed]),
            "mean_train_probe_prior_accuracy@1": mean([r["train_probe_prior"]["accuracy@1"] for r in probed]),
            "all_base_weights_unchanged": all(r["base_unchanged"] for r in rows)}


@np.errstate(divide="ignore", invalid="ignore")
def mixture_summary(weights: np.ndarray, ids: list[str], layer: int, split: str) -> dict:
    """Per-example mixture weights (examples x K) with their mean, entropy and most-weighted partition."""
    entropy = -(weights * np.where(weights > 0, np.log(weights), 0.0)).sum(1)
    top = weights.argmax(1)
    return {"split": split, "layer": layer, "token": "[CLS]", "partitions": int(weights.shape[1]),
            "mean": weights.mean(0).tolist(), "entropy_mean": float(entropy.mean()),
            "entropy_uniform": float(np.log(weights.shape[1])),
            "top_partition_counts": np.bincount(top, minlength=weights.shape[1]).tolist(),
            "examples": [{"id": i, "weights": w.tolist()} for i, w in zip(ids, weights)]}


def last_layer_cls_weights(attentions: dict, fusion: str) -> tuple[int, np.ndarray]:
    """(layer index, batch x K weights at [CLS]) from adapters' ``adapter_fusion_attentions`` output."""
    layers = attentions[fusion]
    last = max(layers)
    where = layers[last]
    location = "output_adapter" if "output_adapter" in where else sorted(where)[-1]
    return last, np.asarray(where[location])[:, 0, :]


def mixture_weights(model_dir: Path, task: Task, env: Environment, split: str, limit: int, max_length: int,
                    batch_size: int, attn_implementation: str = "sdpa") -> tuple[int, np.ndarray, list[str]]:
    """(last layer index, examples x K mixture weights at [CLS], feature ids) on the first ``limit`` features of
    ``split`` (evaluation mode: deterministic for every mixture)."""
    import torch

    from .fusion import load_fused_model

    tokenizer = load_tokenizer(str(model_dir))
    model = load_fused_model(model_dir, task.head(env).kind, attn_implementation)
    fusion = model.active_adapters.name
    examples = task.examples(split, env)
    features = task.featurize(tokenizer, examples, max_length, env)
    one_each = len(features) == len(examples)  # else features are pairs / chunks: name them by position
    features = features[:limit]
    collator = task.collator(tokenizer)
    keys = ("input_ids", "attention_mask", "token_type_ids")  # (token tasks carry word maps the collator can't pad)
    chunks, layer = [], 0
    with torch.inference_mode():
        for lo in range(0, len(features), batch_size):
            batch = collator([{k: f[k] for k in keys if k in f} for f in features[lo:lo + batch_size]])
            out = model(**{k: v for k, v in batch.items() if k in keys}, output_adapter_fusion_attentions=True)
            layer, weights = last_layer_cls_weights(out.adapter_fusion_attentions, fusion)
            chunks.append(weights)
    ids = [str(examples[i].get("id") or f"{split}-{i}") if one_each else f"{split}-{i}" for i in range(len(features))]
    return layer, np.concatenate(chunks) if chunks else np.zeros((0, len(model.active_adapters.children))), ids


def plot_adapters(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = summary["parts"]
    if not any((r.get("heldout") or {}).get("accuracy@10") for r in rows):  # nothing held out or scored: no chart
        return
    fig, ax = plt.subplots(figsize=(max(5.5, 0.35 * len(rows) + 1.5), 3.2))
    for k, shade in (("accuracy@10", "#9ecae1"), ("accuracy@1", "#3182bd")):
        ax.bar([r["part"] for r in rows], [(r["heldout"] or {}).get(k) or 0.0 for r in rows], color=shade,
               label=k)
    priors = [(r["part"], (r.get("heldout_prior") or {}).get("accuracy@1")) for r in rows]
    if any(p is not None for _, p in priors):  # what answering the most frequent tails scores: the level to beat
        ax.scatter([x for x, p in priors if p is not None], [p for _, p in priors if p is not None], marker="_",
                   s=300, color="#d62728", label="tail prior accuracy@1", zorder=3)
    ax.set_ylim(0, 1)
    ax.set_xlabel("partition")
    ax.set_ylabel("held-out tail prediction")
    ax.set_xticks([r["part"] for r in rows])
    ax.legend(fontsize=8)
    ax.set_title("Partition adapters on their held-out triples")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_mixture(summary: dict, path: Path, show: int = 30) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    weights = np.asarray([e["weights"] for e in summary["examples"][:show]])
    k = summary["partitions"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(5.0, 0.35 * k + 2), 2.0 + 0.18 * len(weights)),
                                      gridspec_kw={"height_ratios": [max(len(weights), 4), 4]})
    deviation = weights - 1.0 / k  # shown against uniform on a fixed scale: 1e-4 differences stay pale
    limit = max(0.05, float(np.abs(deviation).max()) if deviation.size else 0.0)
    image = top.imshow(deviation, aspect="auto", cmap="RdBu_r", vmin=-limit, vmax=limit)
    top.set_ylabel("example")
    top.set_title(f"Mixture weights of [CLS] at layer {summary['layer'] + 1} ({summary['split']}), minus uniform "
                  f"1/{k}", fontsize=9, wrap=True)
    fig.colorbar(image, ax=top, fraction=0.03, label="weight - 1/K")
    bottom.bar(range(k), summary["mean"], color="#3182bd")
    bottom.axhline(1.0 / k, color="grey", lw=0.8, ls="--", label="uniform")
    bottom.set_ylim(0, max(2.0 / k, float(np.max(summary["mean"])) * 1.1 if len(summary["mean"]) else 1.0))
    bottom.set_xlabel("partition")
    bottom.set_ylabel("mean")
    for ax in (top, bottom):
        ax.set_xticks(range(k))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_json(path: Path, data: dict) -> None:
    Path(path).write_text(json.dumps(data, indent=1))


# -- the report stage ------------------------------------------------------------------------------------ #
def report_body(cfg: ReportConfig, ctx: StageContext) -> None:
    if not is_main_process():
        return
    summary = adapter_summary([json.loads((ctx.inputs[name] / "adapter.json").read_text()) for name in cfg.adapters])
    write_json(ctx.out / "partition-adapters.json", summary)
    plot_adapters(summary, ctx.out / "partition-adapters.png")
    if len(cfg.adapters) < 2:  # one adapter used alone: no mixture
        return
    task, env = cfg.task.build(), cfg.task.environment(ctx)
    layer, weights, ids = mixture_weights(ctx.inputs[cfg.model_stage] / "model", task, env, cfg.split, cfg.examples,
                                          cfg.max_length, cfg.batch_size, cfg.attn_implementation)
    mixture = mixture_summary(weights, ids, layer, cfg.split)
    write_json(ctx.out / "mixture.json", mixture)
    plot_mixture(mixture, ctx.out / "mixture.png")
