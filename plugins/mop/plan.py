"""MoP's plan: what validation resolves (the knowledge graph, the adapter config) and counts, and the builders of
each stage from the strategy's config. Strategy-side code: no stage's key covers this module."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kinject.api import SourceRef, SpecError, Stage, TrainingSpec
from kinject.training import evaluate_stage, finetune_stage

from .config import MopConfig
from .entity_prediction import adapter_body
from .fusion import FusedEvaluateConfig, FusionConfig
from .part_adapters import resolve_adapter_config
from .partition import partition_body
from .report import report_body
from .stages import KGSettings, PartAdapterConfig, PartitionConfig, ReportConfig

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
    """How the comparison names this MoP: mop-<mixture>, for a subset mop-<mixture>-parts-i-j, for one part
    mop-part-i-alone."""
    parts = used_parts(cfg)
    if len(parts) == cfg.partitions:
        return f"mop-{cfg.mixture}"
    if len(parts) == 1:
        return f"mop-part-{parts[0]}-alone"
    return f"mop-{cfg.mixture}-parts-{'-'.join(map(str, parts))}"


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


def knowledge_stages(run, cfg: MopConfig, resolved: Resolved) -> list[Stage]:
    """``mop-partition`` and one spread ``mop-adapter-<i>`` per used part. They read the model's weights and
    tokenizer only: the task's pooling and max length (and the run seed, and which parts a run uses) would re-key,
    and retrain, identical adapters."""
    model = run.model_ref().model_copy(update={"pooling": "cls", "max_length": cfg.kg_max_length})
    kg = KGSettings(source=resolved.source, max_length=cfg.kg_max_length, max_triples=cfg.kg_max_triples)
    partition = Stage(name=PARTITION, body=partition_body, artifacts=("partition.json",), config=PartitionConfig(
        model=model, kg=kg, partitions=cfg.partitions, seed=cfg.kg_seed, shuffle=cfg.shuffle,
        cross_part=cfg.cross_part))
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
    """``mop-finetune`` (the kernel's fine-tune body, :class:`FusionConfig`) and ``mop-evaluate`` (the kernel's
    evaluate body loading the fused model, :class:`FusedEvaluateConfig`)."""
    mixture = {"mixture": cfg.mixture, "tau": cfg.tau, "top_k": cfg.top_k, "loss_coef": cfg.moe_loss_coef}
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
