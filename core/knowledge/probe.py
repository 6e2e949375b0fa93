"""The knowledge probe: did the knowledge go in? One cheap measurement, the same for every arm of a comparison.

It asks about the graph the comparison injects (``hooks.knowledge-probe.source``; default: the run's first triples
source, else the HPO is-a graph) - every arm of a grid the same one. A frozen encoder embeds both names of each fact
(mean-pooled last hidden states, ``kinject.tasks.masked_mean``); a logistic regression on ``[u, v, |u - v|, u * v]``
is fit on probe-train pairs and scored on probe-test pairs (AUROC and accuracy; balanced linked / not-linked pairs,
the negatives hard: an entity the graph links to a neighbour of the head, never to the head; heads disjoint between
probe-train and probe-test, so chance is 0.5). Which facts it tests says what it measures:

* **generalisation** - when the run holds facts out of its sources (``knowledge.exclude``), the probe-test facts
  are drawn from the held-out facts of the graph: facts no method was shown;
* **memorisation** - otherwise they are edges of the injected graph (held out of the probe's regression only).

Two stages: ``probe-base`` scores the run's base model (keyed by the base model and the probe's settings only, so
every strategy and task with the same probe shares it); ``probe`` scores the model the run's last evaluate stage
scores, loaded by that stage's own config (``load_model``: a MoP fused model too), and writes ``probe.json``
(``{model, base, chance, gain, gain_ci, facts}``; the interval bootstraps probe-test heads) and
``probe-predictions.jsonl`` (one record per probe-test pair: what ``kinject compare`` pairs between arms).

The stages are added to every run with a task and an evaluate stage by the knowledge library's hook plugin
(:mod:`kinject.knowledge.probe_hook`); ``--set hooks.knowledge-probe.enabled=false`` leaves them out.
"""

from __future__ import annotations

import json
import logging
import random
import time
from pathlib import Path
from typing import Any

from pydantic import Field, SerializeAsAny

from kinject.api import (ModelRef, NOT_KEYED, RUN_METRICS_FILE, Environment, SourceRef, StageConfig, StageContext,
                         is_main_process)
from kinject.training import EvaluateConfig

log = logging.getLogger("kinject")

PROBE_FILE = "probe.json"
PREDICTIONS_FILE = "probe-predictions.jsonl"
CHANCE = 0.5  # balanced yes/no pairs
LABELS = ("no", "yes")
RESAMPLES = 1000  # of the probe's own model - base interval


class ProbeSettings(StageConfig):
    """Which facts the probe asks about and how it reads them (the same for the base model and the run's)."""

    source: SourceRef = Field(description="The graph asked about (with the run's held-out facts, when it holds some "
                              "out: then the probe-test facts are drawn from them).")
    train_pairs: int = Field(400, ge=4, description="Probe-train pairs (half yes, half no).")
    test_pairs: int = Field(400, ge=4, description="Probe-test pairs (other head entities than probe-train's).")
    seed: int = Field(0, description="Seed of the facts drawn (fixed: every run is probed on the same facts).")
    max_length: int = Field(64, ge=8, description="Tokens per entity name.")
    regularization: float = Field(1e-3, gt=0, description="Inverse L2 strength (scikit-learn's C) of the probe, on "
                                  "standardised features (1e-3: best in 5-fold cross-validation on minilm's probe-train "
                                  "facts, docs/knowledge-sources.md).")
    batch_size: int = Field(64, ge=1, json_schema_extra=NOT_KEYED, description="Names embedded per batch.")

    def flops(self, run) -> float:
        """Embedding both names of every pair once (names are short: about a quarter of ``max_length``)."""
        from kinject.training import forward_flops

        return forward_flops(run, 2 * (self.train_pairs + self.test_pairs), self.max_length / 4)


class BaseProbeConfig(StageConfig):
    """The probe on the base model (no task, no input: one cached stage per base model and settings)."""

    model: ModelRef
    probe: ProbeSettings

    def cost(self, run) -> float:
        return self.probe.flops(run)


class ProbeConfig(StageConfig):
    """The probe on the model an evaluate stage scores, loaded the way that stage loads it, beside the base's."""

    evaluate: SerializeAsAny[EvaluateConfig] = Field(description="The run's last evaluate stage's config.")
    probe: ProbeSettings
    base_stage: str = Field(description="The input stage that probed the base model.")

    def cost(self, run) -> float:
        return self.probe.flops(run)


# -- the facts ------------------------------------------------------------------------------------------------ #
def _record(head: str, other: str, label: str) -> dict:
    return {"id": f"{head}>{other}", "text": head, "text_pair": other, "label": label, "group": head}


_FACTS: dict[str, dict[str, Any]] = {}  # this process's drawn facts by settings (the source ref holds its fingerprint)
KEPT_FACT_SETS = 4


def probe_facts(settings: ProbeSettings, cache_dir: Path | None = None) -> dict[str, Any]:
    """The probe's ``train`` and ``test`` pairs (``id``, ``text``, ``text_pair``, ``label`` yes/no, ``group``: the
    head) and what kind of probe they make (``kind``: generalisation or memorisation; ``held_out``: how many of the
    probe-test facts were held out of injection). Drawn once per process for the same settings: the source ref's
    fingerprint changes with the knowledge it yields, and reading the HPO graph is most of the probe's time (its parse
    is kept in ``cache_dir``, :mod:`kinject.knowledge.sources.parsed`)."""
    key = settings.model_dump_json()
    if key not in _FACTS:
        if len(_FACTS) >= KEPT_FACT_SETS:
            _FACTS.pop(next(iter(_FACTS)))
        _FACTS[key] = _draw_facts(settings, cache_dir)
    return _FACTS[key]


def _draw_facts(settings: ProbeSettings, cache_dir: Path | None = None) -> dict[str, Any]:
    from kinject.api import words

    ref = settings.source
    env = Environment(data_dir=Path(ref.data_dir), cache_dir=Path(cache_dir) if cache_dir else Path("."))
    edges = [(t.head, t.tail) for t in ref.build().iter_triples(env) if t.head != t.tail]
    held = []
    if ref.holdout is not None:
        names = {words(n): n for pair in edges for n in pair}
        for head, _, tail in ref.holdout.held_out().iter_triples():  # as the graph names them, when it does
            head, tail = names.get(words(head)), names.get(words(tail))
            if head and tail and head != tail:
                held.append((head, tail))
    linked: dict[str, set[str]] = {}
    for head, tail in edges + held:
        linked.setdefault(head, set()).add(tail)
        linked.setdefault(tail, set()).add(head)
    tails_of: dict[str, list[str]] = {}
    for head, tail in edges:
        tails_of.setdefault(head, []).append(tail)
    rng = random.Random(f"knowledge-probe:{settings.seed}")
    all_tails = sorted({tail for _, tail in edges})

    def negative(head: str, positive: str) -> str | None:
        """An entity linked to a neighbour of ``head`` (a sibling or an uncle), never to ``head``; else any tail."""
        near = sorted({x for n in linked.get(positive, ()) for x in linked.get(n, ())} - linked[head] - {head})
        if near:
            return rng.choice(near)
        for _ in range(50):
            other = rng.choice(all_tails)
            if other != head and other not in linked[head]:
                return other
        return None

    def pairs(candidates: list[tuple[str, str]], size: int, used: set[str]) -> list[dict]:
        rows: list[dict] = []
        for head, tail in candidates:
            if len(rows) >= size:
                break
            if head in used:
                continue
            other = negative(head, tail)
            if other is None:
                continue
            used.add(head)
            rows += [_record(head, tail, "yes"), _record(head, other, "no")]
        return rows

    used: set[str] = set()
    train_pool = sorted(set(edges))
    rng.shuffle(train_pool)
    if held:
        test_pool, kind = sorted(set(held)), "generalisation"
    else:  # memorisation: the heads split in two halves, so a small graph leaves probe-train its share
        heads = sorted({head for head, _ in edges})
        rng.shuffle(heads)
        tested = set(heads[: len(heads) // 2])
        test_pool, kind = [e for e in train_pool if e[0] in tested], "memorisation"
        train_pool = [e for e in train_pool if e[0] not in tested]
    rng.shuffle(test_pool)
    test = pairs(test_pool, settings.test_pairs, used)
    train = pairs(train_pool, settings.train_pairs, used)
    return {"train": train, "test": test, "kind": kind, "held_out": sum(r["label"] == "yes" for r in test)
            if held else 0}


MIN_PAIRS = 8  # fewer probe-train or probe-test pairs: the probe is skipped (probe.json says why)


# -- the measurement ------------------------------------------------------------------------------------------ #
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

    from kinject.tasks import masked_mean

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


def score(model, tokenizer, settings: ProbeSettings, facts: dict | None = None) -> dict[str, Any]:
    """Fit the probe on the probe-train facts with ``model``'s frozen embeddings; AUROC and accuracy on probe-test,
    and the probe-test probabilities (``_probabilities``, in probe-test order)."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, roc_auc_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    start = time.perf_counter()
    facts = facts or probe_facts(settings)
    names = [name for split in ("train", "test") for p in facts[split] for name in (p["text"], p["text_pair"])]
    vectors = embed(model, tokenizer, names, settings.max_length, settings.batch_size)
    labels = {split: np.array([p["label"] == "yes" for p in facts[split]], dtype=int) for split in ("train", "test")}
    probe = make_pipeline(StandardScaler(), LogisticRegression(C=settings.regularization, max_iter=2000))
    probe.fit(_features(vectors, facts["train"]), labels["train"])
    chosen = probe.predict_proba(_features(vectors, facts["test"]))[:, 1]
    return {"auroc": float(roc_auc_score(labels["test"], chosen)),
            "accuracy": float(accuracy_score(labels["test"], chosen >= 0.5)),
            "train_pairs": len(facts["train"]), "test_pairs": len(facts["test"]),
            "seconds": round(time.perf_counter() - start, 3), "_probabilities": chosen.tolist()}


def gain_interval(facts: dict, model: list[float], base: list[float], seed: int = 0) -> list[float]:
    """95% bootstrap interval of the AUROC gain (model - base) over probe-test heads (both pairs of a head together);
    all replicates at once (``kinject.tasks.weighted_auroc`` on each replicate's example counts)."""
    import numpy as np

    from kinject.tasks import weighted_auroc

    rows = facts["test"]
    y = np.array([r["label"] == "yes" for r in rows], dtype=bool)
    _, codes = np.unique([str(r["group"]) for r in rows], return_inverse=True)
    groups = int(codes.max()) + 1
    draws = np.random.default_rng(seed).integers(0, groups, (RESAMPLES, groups))
    drawn = np.stack([np.bincount(row, minlength=groups) for row in draws])[:, codes]  # replicate x example counts
    gains = weighted_auroc(model, y, drawn) - weighted_auroc(base, y, drawn)
    gains = gains[np.isfinite(gains)]  # a replicate with one class has no AUROC
    return [float(v) for v in np.quantile(gains, [0.025, 0.975])] if len(gains) else [float("nan")] * 2


# -- the stage bodies ----------------------------------------------------------------------------------------- #
def base_probe_body(cfg: BaseProbeConfig, ctx: StageContext) -> None:
    """Probe the base encoder (``probe.json``: ``{"base": scores}`` with its probe-test probabilities)."""
    facts = probe_facts(cfg.probe, ctx.cache_dir)
    if min(len(facts["train"]), len(facts["test"])) < MIN_PAIRS:  # the probe stage says why
        result: dict = {"base": None}
    else:
        result = {"base": score(cfg.model.load_encoder(), cfg.model.load_tokenizer(), cfg.probe, facts)}
    if is_main_process():
        (ctx.out / PROBE_FILE).write_text(json.dumps(result, indent=2))


def probe_body(cfg: ProbeConfig, ctx: StageContext) -> None:
    """Probe the model of the evaluate stage's ``model_stage`` (loaded by ``cfg.evaluate.load_model``) and write
    ``probe.json`` (``{model, base, chance, gain, gain_ci, facts}``) and ``probe-predictions.jsonl``."""
    from kinject.api import load_tokenizer

    model_dir = Path(ctx.inputs[cfg.evaluate.model_stage]) / "model"
    task = cfg.evaluate.task.build()
    model = cfg.evaluate.load_model(model_dir, task.head(cfg.evaluate.task.environment(ctx)))
    facts = probe_facts(cfg.probe, ctx.cache_dir)
    if min(len(facts["train"]), len(facts["test"])) < MIN_PAIRS:
        reason = (f"the graph {cfg.probe.source.name!r} gives too few facts with a hard negative "
                  f"({len(facts['train'])} probe-train, {len(facts['test'])} probe-test pairs; at least {MIN_PAIRS})")
        log.warning("knowledge probe skipped: %s", reason)
        if is_main_process():
            (ctx.out / PROBE_FILE).write_text(json.dumps({"skipped": reason}, indent=2))
            (ctx.out / PREDICTIONS_FILE).write_text("")
        return
    scores = score(model, load_tokenizer(str(model_dir)), cfg.probe, facts)
    base = json.loads((Path(ctx.inputs[cfg.base_stage]) / PROBE_FILE).read_text())["base"]
    probabilities = scores.pop("_probabilities")
    base_probabilities = base.pop("_probabilities", None)
    ci = gain_interval(facts, probabilities, base_probabilities) if base_probabilities else [float("nan")] * 2
    from kinject.api import facts_digest, fact_key

    positives = [(r["text"], r["text_pair"]) for r in facts["test"] if r["label"] == "yes"]
    result = {"model": scores, "base": base, "chance": CHANCE,
              "gain": {k: scores[k] - base[k] for k in ("auroc", "accuracy")}, "gain_ci": {"auroc": ci},
              "facts": {"source": cfg.probe.source.name, "options": cfg.probe.source.options, "kind": facts["kind"],
                        "held_out": facts["held_out"], "train_pairs": scores["train_pairs"],
                        "test_pairs": scores["test_pairs"],
                        "digest": facts_digest([fact_key(h, "", t) for h, t in positives]),
                        "probe": "logistic regression on [u, v, |u-v|, u*v] of frozen mean-pooled states"}}
    if is_main_process():
        (ctx.out / PROBE_FILE).write_text(json.dumps(result, indent=2))
        with open(ctx.out / PREDICTIONS_FILE, "w", encoding="utf-8") as handle:
            for row, p in zip(facts["test"], probabilities):
                handle.write(json.dumps({"id": row["id"], "gold": row["label"], "pred": "yes" if p >= 0.5 else "no",
                                         "scores": [1.0 - p, p], "group": row["group"]}) + "\n")
        # the run's metrics.json gets a "probe" section (numbers only, so --repeats summarises it over seeds)
        section = {"auroc": scores["auroc"], "accuracy": scores["accuracy"], "base_auroc": base["auroc"],
                   "base_accuracy": base["accuracy"], "gain_auroc": result["gain"]["auroc"],
                   "gain_auroc_low": ci[0], "gain_auroc_high": ci[1],
                   "gain_accuracy": result["gain"]["accuracy"], "chance": CHANCE,
                   "generalisation": 1.0 if facts["kind"] == "generalisation" else 0.0}
        (ctx.out / RUN_METRICS_FILE).write_text(json.dumps({"probe": section}, indent=2))
