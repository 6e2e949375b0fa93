"""The `mop` strategy: Mixture-of-Partitions (Meng et al., EMNLP 2021). Its config, what validation resolves, the
stage builders and the Strategy class; the stage bodies and their configs live in the modules they run.

Stages (each cached): ``finetune`` + ``evaluate`` (the plain baseline, the `finetune` strategy's own stages and cache
keys), ``mop-partition`` (METIS over the KG's entity graph, :mod:`.partition`), ``mop-adapter-<i>`` for each part i
used (one bottleneck adapter per part, base frozen, :mod:`.entity_prediction`; spread over the processes of a
``torchrun`` launch), ``mop-finetune`` (base + adapters + mixture + task head, :mod:`.fusion`), ``mop-evaluate``,
``mop-report`` (adapter accuracy per part, mixture weights, :mod:`.report`) and ``mop-compare`` (MoP vs the
baseline, paired). The knowledge side holds no task and no run seed, so every task and seed reuses the same cached
adapters.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from kinject.api import PluginConfig, SourceRef, SpecError, Stage, Strategy, TrainingSpec
from kinject.training import evaluate_stage, finetune_stage

from .entity_prediction import PartAdapterConfig, adapter_body
from .fusion import FusedEvaluateConfig, FusionConfig, MixtureSettings
from .part_adapters import resolve_adapter_config
from .partition import KGSettings, PartitionConfig, partition_body
from .report import ReportConfig, report_body

Mixture = Literal["softmax", "gumbel", "moe"]


class MopConfig(PluginConfig):
    partitions: int = Field(20, ge=2, description="K: METIS parts of the entity graph, one adapter each (paper: "
                            "5/10/20/40, 20 best).")
    mixture: Mixture = Field("softmax", description="How the K adapters are mixed in every layer: softmax "
                             "(AdapterFusion, the paper's default), gumbel (Gumbel-softmax at temperature tau; "
                             "deterministic softmax(scores/tau) at evaluation) or moe (noisy top-k with a "
                             "load-balancing loss; no noise at evaluation).")
    tau: float = Field(0.5, gt=0, description="Gumbel-softmax temperature (mixture: gumbel; paper: 0.1-0.75).")
    top_k: int = Field(2, ge=1, description="Adapters mixed per token (mixture: moe; paper: 2-15). At most K.")
    moe_loss_coef: float = Field(0.01, ge=0, description="Weight of the MoE load-balancing loss "
                                 "(cv^2 of importance + cv^2 of load, Shazeer et al. 2017).")
    finetune: Literal["joint", "fusion"] = Field(
        "joint", description="Downstream training: joint (base model, adapters and fusion together, as the paper "
        "did) or fusion (base and adapters frozen; fusion layers and the task head train; with one adapter in "
        "adapters_used, the task head alone). With adapter_max_steps=0: fusion over untrained adapters.")
    fusion_regularization: bool = Field(
        True, description="Add the \"dynamic\" fusion's value regulariser, 0.01 |I - W_v|^2 per layer, to the "
        "training loss (AdapterFusion's; the MoP reference code never adds it).")
    adapters_used: list[int] | None = Field(
        None, description="Partition adapters the task model uses (None: all K). One part [i]: that adapter alone, no "
        "fusion (the paper's Fig. 2); several [i, j, ...]: fusion of those parts only (its Tables 7/8). Sorted; the "
        "adapter stages are the same cache entries whichever parts a run uses.")
    shuffle: float = Field(0.0, ge=0, le=1, description="Move this fraction of entities to random parts after "
                           "METIS (the paper's Table 3 control; part sizes kept).")
    cross_part: Literal["drop", "head"] = Field(
        "drop", description="Triples whose head and tail fall in different parts: drop (the reference code) or "
        "keep them in the head's part (its classifier then also covers those foreign tails).")
    bidirectional: bool = Field(False, description="Also train head prediction: [CLS] r [SEP] t [SEP] -> h "
                                "(the reference's --bi_direction).")
    entity_head: Literal["names", "linear", "frozen-random"] = Field(
        "names", description="How the adapter's training head scores a part's entities: names (kinject's "
        "fact-storing head, from [CLS]: cosine to each entity's name embedding by the frozen base model, learned "
        "projection, scale and per-entity bias), linear (from [CLS]: one free softmax row per entity, trained with the "
        "adapter, kinject's; at our scale it learns only the tail prior, see docs/mop.md) or frozen-random (MoP's "
        "objective, the reference code's: dropout and a random linear map from the pooler output that never trains, "
        "so only the adapter learns; protocol=paper). Only the adapters carry on to the fusion; the head is "
        "discarded.")
    metis: Literal["kway", "recursive"] = Field(
        "kway", description="How METIS splits the entity graph: kway (METIS_PartGraphKway for every K, as the "
        "reference does) or recursive (recursive bisection, which pymetis picks by itself for K <= 8).")
    kg_seed: int = Field(1, description="Seed of the knowledge side: METIS, the shuffle, held-out triples and "
                         "adapter training (reference: METIS seed 1). Independent of the run seed, so every task "
                         "and seed reuses the same cached adapters.")
    kg_max_triples: int | None = Field(None, ge=1, description="Use a seeded sample of about N triples of the "
                                       "default HPO graph, or the first N of a configured source (None: all).")
    kg_max_length: int = Field(64, ge=16, description="Tokens per KG sequence (reference: 64).")
    adapter: str | dict[str, Any] = Field(
        "seq_bn", description="Adapter config: an `adapters` bottleneck config name (seq_bn = Pfeiffer, "
        "double_seq_bn = Houlsby, par_bn, ...) or a dict of its fields (e.g. {architecture: bottleneck, ...}).")
    reduction_factor: float | None = Field(8, gt=0, description="Bottleneck reduction factor (reference: 8); "
                                           "None keeps the adapter config's own.")
    adapter_epochs: float = Field(2.0, gt=0, description="Epochs over each part's triples (reference: 1-2).")
    adapter_max_steps: int = Field(-1, ge=-1, description="Cap on optimiser steps per part (-1: by epochs; 0: no "
                                   "training at all, adapters stay at their initialisation: a no-knowledge control).")
    adapter_learning_rate: float = Field(1e-4, gt=0, description="Adapter training peak learning rate (reference: "
                                         "1e-4, AdamW, weight decay 0.01, no warm-up).")
    adapter_warmup_ratio: float = Field(0.1, ge=0, le=1, description="Fraction of each part's adapter steps for "
                                        "linear warm-up (kinject's default 0.1; the reference: 0, linear decay only).")
    adapter_batch_size: int = Field(64, ge=1, description="Adapter training batch size (reference: 256 on KGs "
                                    "with ~100k triples per part; smaller here so small parts get enough steps).")
    heldout_fraction: float = Field(0.1, ge=0, lt=1, description="Fraction of each part's triples held out to "
                                    "measure its adapter's entity prediction on unseen triples (kinject's "
                                    "diagnostic; the reference trains on all of them). The paper's Fig. 2 is the "
                                    "downstream score of each adapter alone: adapters_used=[i].")
    baseline: bool = Field(True, description="Also fine-tune and evaluate the plain model (the `finetune` "
                           "strategy's stages, shared cache) and compare MoP against it, paired.")
    analysis: bool = Field(True, description="Write per-partition adapter accuracy and per-example mixture "
                           "weights (JSON + PNG).")
    mixture_examples: int = Field(200, ge=1, description="Evaluation examples whose mixture weights are recorded.")

    @field_validator("adapters_used")
    @classmethod
    def _distinct_sorted(cls, parts: list[int] | None) -> list[int] | None:
        if parts is None:
            return None
        if not parts:
            raise ValueError("name at least one part (None: all K)")
        if len(set(parts)) < len(parts) or min(parts) < 0:
            raise ValueError(f"parts must be distinct and >= 0 (got {parts})")
        return sorted(parts)


# -- what validate resolves, and the checks ---------------------------------------------------------- #
LIBRARIES = ("torch", "transformers", "tokenizers", "adapters")
PARTITION, FUSION, EVALUATE, REPORT = "mop-partition", "mop-finetune", "mop-evaluate", "mop-report"


@dataclasses.dataclass(frozen=True)
class Resolved:
    """What ``MopStrategy.validate`` resolved for its stages: the KG and the adapters config (a dict)."""

    source: SourceRef
    adapter: dict


def resolve(run, cfg: MopConfig) -> Resolved:
    """Everything that can fail, before any stage: the KG (the run's source, else the embedded HPO graph sampled to
    ``kg_max_triples``), checked to have triples and at least ``partitions`` entities, and the adapters config."""
    from kinject.knowledge import triples_source

    if len(run.sources) > 1:
        raise SpecError(f"sources: MoP partitions one knowledge graph; merge the graphs into one `triples` "
                        f"source (got {len(run.sources)} sources)")
    check_config(cfg, run.model_path)
    adapter = resolve_adapter_config(cfg.adapter, cfg.reduction_factor, run.model_path)
    source = triples_source(run, cfg.kg_max_triples)
    entities, triples = count_graph(source, run.env, cfg.kg_max_triples)
    where = "sources.0" if run.sources else "strategy.kg_max_triples"
    if triples == 0:
        raise SpecError(f"{where}: knowledge source {source.name!r} yields no triples")
    if cfg.partitions > entities:
        raise SpecError(f"strategy.partitions: {cfg.partitions} parts but the knowledge graph has only "
                        f"{entities} entities")
    return Resolved(source=source, adapter=adapter)


_COUNTS: dict[tuple, tuple[int, int]] = {}


def count_graph(ref: SourceRef, env, cap: int | None) -> tuple[int, int]:
    """(entities, triples) of a source reference's KG under ``cap`` - what the partition stage will see. Streamed
    (only the entity vocabulary is held); remembered per source fingerprint for the process (``--repeats``)."""
    from kinject.knowledge import Vocab, intern_triples

    key = (ref.name, ref.fingerprint, cap)
    if key not in _COUNTS:
        vocab = Vocab()
        source_env = dataclasses.replace(env, data_dir=Path(ref.data_dir), limit=None)
        rows = sum(len(chunk[0]) for chunk in intern_triples(ref.build().iter_triples(source_env), vocab, cap=cap))
        _COUNTS[key] = (len(vocab.entities), rows)
    return _COUNTS[key]


def used_parts(cfg: MopConfig) -> list[int]:
    """The parts whose adapters the task model uses: ``adapters_used``, else all K."""
    return list(cfg.adapters_used) if cfg.adapters_used is not None else list(range(cfg.partitions))


def variant_label(cfg: MopConfig) -> str:
    """How comparisons, leaderboards and the card name this MoP: ``mop`` for the paper's (the reference's frozen
    random entity head, softmax fusion of all K adapters), else ``mop/`` and what differs: the entity head
    (``mop/names``: fact-storing heads; ``mop/linear``), the mixture, the parts used (``mop/part-1``: one adapter alone,
    ``mop/parts-0-2``)."""
    parts = used_parts(cfg)
    differs = [cfg.entity_head] if cfg.entity_head != "frozen-random" else []
    differs += [cfg.mixture] if cfg.mixture != "softmax" else []
    if len(parts) < cfg.partitions:
        differs += [f"part-{parts[0]}" if len(parts) == 1 else f"parts-{'-'.join(map(str, parts))}"]
    return "mop/" + "+".join(differs) if differs else "mop"


def check_config(cfg: MopConfig, model_path: str) -> None:
    """SpecError for settings that contradict each other or the model: a used part beyond K, a MoE top_k above
    the adapters fused, the frozen-random entity head on a model without a pooler."""
    parts = used_parts(cfg)
    if parts[-1] >= cfg.partitions:
        raise SpecError(f"strategy.adapters_used: part {parts[-1]} but only {cfg.partitions} partitions "
                        f"(0..{cfg.partitions - 1})")
    if cfg.mixture == "moe" and len(parts) > 1 and cfg.top_k > len(parts):
        fused = f"{len(parts)} partitions" if len(parts) == cfg.partitions else \
            f"{len(parts)} adapters in strategy.adapters_used"
        raise SpecError(f"strategy.top_k: {cfg.top_k} adapters per token but only {fused}")
    if cfg.entity_head == "frozen-random":
        from transformers import AutoConfig, AutoModel

        from kinject.api import offline

        config = AutoConfig.from_pretrained(model_path, local_files_only=offline())
        config.num_hidden_layers = 1
        if getattr(AutoModel.from_config(config), "pooler", None) is None:
            raise SpecError(f"strategy.entity_head: frozen-random reads the pooler output; {model_path} has no "
                            "pooler (use names or linear)")


# -- stage builders ---------------------------------------------------------------------------------- #
def knowledge_stages(run, cfg: MopConfig, resolved: Resolved) -> list[Stage]:
    """``mop-partition`` and one spread ``mop-adapter-<i>`` per used part. They read the model's weights and
    tokenizer only: the task's pooling and max length (and the run seed, and which parts a run uses) would re-key,
    and retrain, identical adapters."""
    model = run.model_ref().model_copy(update={"pooling": "cls", "max_length": cfg.kg_max_length})
    kg = KGSettings(source=resolved.source, max_length=cfg.kg_max_length, max_triples=cfg.kg_max_triples)
    partition = Stage(name=PARTITION, body=partition_body, artifacts=("partition.json",), config=PartitionConfig(
        model=model, kg=kg, partitions=cfg.partitions, seed=cfg.kg_seed, shuffle=cfg.shuffle,
        cross_part=cfg.cross_part, metis=cfg.metis))
    training = adapter_training(run, cfg)
    return [partition, *(Stage(name=f"mop-adapter-{i}", body=adapter_body, inputs=(PARTITION,), libraries=LIBRARIES,
                               spread=True, config=PartAdapterConfig(
                                   model=model, kg=kg, partition_stage=PARTITION, part=i, adapter=resolved.adapter,
                                   training=training, seed=cfg.kg_seed, heldout_fraction=cfg.heldout_fraction,
                                   bidirectional=cfg.bidirectional, entity_head=cfg.entity_head))
                         for i in used_parts(cfg))]


def adapter_training(run, cfg: MopConfig) -> TrainingSpec:
    """Partition-adapter optimisation (AdamW, weight decay 0.01, warm-up ``adapter_warmup_ratio``: 0.1 by default,
    the reference 0); the run's training settings are for the task, so they do not reach (or key) the knowledge
    side, except how often to log and checkpoint, and the precision."""
    task = run.spec.training
    epochs = run.knowledge_epochs  # the run's knowledge dose, when it asks for one, instead of adapter_epochs
    return TrainingSpec(epochs=epochs or cfg.adapter_epochs, max_steps=-1 if epochs else cfg.adapter_max_steps,
                        learning_rate=cfg.adapter_learning_rate, batch_size=cfg.adapter_batch_size,
                        weight_decay=0.01, warmup_ratio=cfg.adapter_warmup_ratio, group_by_length=True,
                        save_steps=task.save_steps, logging_steps=task.logging_steps, bf16=task.bf16, selection="last")


def fusion_stages(run, cfg: MopConfig, adapters: list[str]) -> list[Stage]:
    """``mop-finetune`` (the training library's fine-tune body, :class:`.fusion.FusionConfig`) and ``mop-evaluate``
    (its evaluate body loading the fused model, :class:`.fusion.FusedEvaluateConfig`)."""
    mixture = MixtureSettings(mixture=cfg.mixture, tau=cfg.tau, top_k=cfg.top_k, loss_coef=cfg.moe_loss_coef)
    finetune = finetune_stage(run, name=FUSION)
    config = FusionConfig(**dict(finetune.config), adapters=adapters, mixture=mixture, joint=cfg.finetune == "joint",
                          regularization=cfg.fusion_regularization)
    evaluate = evaluate_stage(run, FUSION, name=EVALUATE)
    return [dataclasses.replace(finetune, config=config, inputs=tuple(adapters), libraries=LIBRARIES),
            dataclasses.replace(evaluate, config=FusedEvaluateConfig(**dict(evaluate.config)), libraries=LIBRARIES)]


def report_stage(run, cfg: MopConfig, adapters: list[str], evaluate: Stage) -> Stage:
    """``mop-report``: the adapters' accuracy per part and the mixture weights on the test split (else the last
    evaluation split); a single adapter alone has no mixture."""
    splits = evaluate.config.splits or list(run.task.eval_splits)
    mixture = ("mixture.json", "mixture.png") if len(adapters) > 1 else ()
    return Stage(name=REPORT, body=report_body, inputs=(*adapters, FUSION), libraries=LIBRARIES,
                 artifacts=("partition-adapters.json", "partition-adapters.png", *mixture),
                 config=ReportConfig(task=run.task_ref(), model_stage=FUSION, adapters=adapters,
                                       split="test" if "test" in splits else splits[-1],
                                       examples=cfg.mixture_examples, max_length=run.spec.model.max_length,
                                       attn_implementation=run.spec.model.attn_implementation,
                                       batch_size=run.spec.training.eval_batch_size))


# -- the strategy ------------------------------------------------------------------------------------ #
class MopStrategy(Strategy):
    """MoP: METIS-partitioned KG, one adapter per partition (base frozen), adapters mixed while fine-tuning."""

    Config: ClassVar = MopConfig
    consumes: ClassVar[frozenset[str]] = frozenset({"triples"})
    #: Meng et al. 2021 and cambridgeltl/mop (README, train_pubmedbert.sh, run_pretrain.py, bert_trainer.py): adapters
    #: at lr 1e-4, batch 256, no warm-up, 1 epoch (the README's first command; its shuffle runs use 2), max length 64,
    #: the frozen random entity head; K=20, softmax fusion trained jointly downstream at lr 1e-5 for up to 25 epochs,
    #: patience 5, best on dev, batch 16, warm-up 0.1, one learning rate for every parameter, no fusion regulariser.
    #: Differences: docs/mop.md
    protocols: ClassVar[dict] = {"paper": {
        "strategy": {"partitions": 20, "mixture": "softmax", "finetune": "joint", "entity_head": "frozen-random",
                     "metis": "kway",
                     "adapter_learning_rate": 1e-4, "adapter_batch_size": 256, "adapter_warmup_ratio": 0.0,
                     "adapter_epochs": 1, "kg_max_length": 64, "fusion_regularization": False},
        "training": {"learning_rate": 1e-5, "head_learning_rate": None, "epochs": 25, "patience": 5,
                     "selection": "best", "batch_size": 16, "warmup_ratio": 0.1}},
        # kinject run --quick: K=2 (K=4 took 249 s on CAPR on a 2-core AVX2 CPU: every forward runs each adapter)
        "quick": {"strategy": {"partitions": 2, "kg_max_triples": 2000, "adapter_max_steps": 20},
                  "training": {"max_steps": 30}}}

    @staticmethod
    def label(config: MopConfig) -> str:
        """The arm's name (:func:`variant_label`)."""
        return variant_label(config)

    def validate(self, run) -> Resolved:
        """Everything that can fail, before any stage (:func:`resolve`): the KG and the adapters config."""
        super().validate(run)
        return resolve(run, self.config)

    def stages(self, run) -> list[Stage]:
        from kinject.evidence import compare_stage

        cfg = self.config
        stages = [finetune_stage(run), evaluate_stage(run, "finetune", export=False)] if cfg.baseline else []
        knowledge = knowledge_stages(run, cfg, run.resolved)
        adapters = [stage.name for stage in knowledge[1:]]
        fused = fusion_stages(run, cfg, adapters)
        stages += [*knowledge, *fused]
        if cfg.analysis:
            stages.append(report_stage(run, cfg, adapters, fused[-1]))
        if cfg.baseline:
            stages.append(compare_stage(run, baseline="evaluate", other=EVALUATE, name="mop-compare",
                                        labels=("finetune", variant_label(cfg))))
        return stages

    @classmethod
    def shared_files(cls, run_dir, info: dict) -> dict:
        """The task model, plus each partition adapter, the fusion and (joint) the fine-tuned adapters in the
        adapters library's format (:func:`.publish.adapter_files`)."""
        from .publish import adapter_files

        return {**super().shared_files(run_dir, info), **adapter_files(run_dir, info)}
