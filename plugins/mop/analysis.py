"""MoP's analysis artifacts: per-partition adapter accuracy on held-out triples (the paper's Fig. 2) and the
mixture weights over partitions of the last layer's [CLS] per evaluation example (Fig. 4), as JSON and PNG."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


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


def plot_adapters(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = summary["parts"]
    fig, ax = plt.subplots(figsize=(max(5.5, 0.35 * len(rows) + 1.5), 3.2))
    for k, shade in (("accuracy@10", "#9ecae1"), ("accuracy@1", "#3182bd")):
        ax.bar([r["part"] for r in rows], [(r["heldout"] or {}).get(k) or 0.0 for r in rows], color=shade,
               label=k)
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
    image = top.imshow(weights, aspect="auto", cmap="viridis")  # own scale: near-uniform rows still differ
    top.set_ylabel("example")
    top.set_title(f"Mixture weights of [CLS] at layer {summary['layer'] + 1} ({summary['split']})")
    fig.colorbar(image, ax=top, fraction=0.03)
    bottom.bar(range(k), summary["mean"], color="#3182bd")
    bottom.axhline(1.0 / k, color="grey", lw=0.8, ls="--")
    bottom.set_xlabel("partition")
    bottom.set_ylabel("mean")
    for ax in (top, bottom):
        ax.set_xticks(range(k))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_json(path: Path, data: dict) -> None:
    Path(path).write_text(json.dumps(data, indent=1))
