"""The `mop` strategy: Mixture-of-Partitions (Meng et al., EMNLP 2021).

Stages (each cached; configs and bodies in :mod:`.stages`): ``finetune`` + ``evaluate`` (the plain baseline, the
`finetune` strategy's own stages and cache keys), ``mop-partition`` (METIS over the KG's entity graph),
``mop-adapter-<i>`` for i < K (one bottleneck adapter per part, base frozen; spread over the processes of a
``torchrun`` launch), ``mop-finetune`` (base + adapters + mixture + task head), ``mop-evaluate``,
``mop-analysis`` (adapter accuracy per part, mixture weights) and ``mop-compare`` (MoP vs the baseline, paired).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar

from kinject.api import SpecError, Stage, Strategy

from .config import MopConfig
from .fusion import fusion_body
from .knowledge import adapter_body, partition_body
from .scoring import analysis_body
from .stages import PARTITION, AnalysisConfig, FusionConfig, KGSettings, PartAdapterConfig, PartitionConfig

LIBRARIES = ("torch", "transformers", "tokenizers", "adapters")


class MopStrategy(Strategy):
    """MoP: METIS-partitioned KG, one adapter per partition (base frozen), adapters mixed while fine-tuning."""

    Config: ClassVar = MopConfig
    consumes: ClassVar[frozenset[str]] = frozenset({"triples"})

    # -- validation (runs in prepare, before any stage) ----------------------------------------- #
    def validate(self, run) -> None:
        super().validate(run)
        cfg = self.config
        if len(run.sources) > 1:
            raise SpecError(f"sources: MoP partitions one knowledge graph; merge the graphs into one `triples` "
                            f"source (got {len(run.sources)} sources)")
        if cfg.mixture == "moe" and cfg.top_k > cfg.partitions:
            raise SpecError(f"strategy.top_k: {cfg.top_k} adapters per token but only {cfg.partitions} partitions")
        self.adapter_config(run, probe=True)
        source = self.source_ref(run)
        entities, triples = count_graph(source, run.env, cfg.kg_max_triples)
        where = "sources.0" if run.sources else "strategy.kg_max_triples"
        if triples == 0:
            raise SpecError(f"{where}: knowledge source {source.name!r} yields no triples")
        if cfg.partitions > entities:
            raise SpecError(f"strategy.partitions: {cfg.partitions} parts but the knowledge graph has only "
                            f"{entities} entities")

    def source_ref(self, run):
        """The KG: the run's source, else the embedded HPO graph (sampled to ``kg_max_triples``)."""
        from kinject.api import SourceRef

        if run.sources:
            return run.source_refs()[0]
        if "mop-source" not in run._refs:
            from kinject.api import registry
            from kinject.plugins.knowledge.sources.hpo import default_source

            registry("sources").get("hpo")  # names the class "hpo", so a worker process can rebuild it by name
            built = default_source(self.config.kg_max_triples)
            built.check(run.env)
            run._refs["mop-source"] = SourceRef.of(built, dataclasses.replace(run.env, limit=None))
        return run._refs["mop-source"]

    def adapter_config(self, run, probe: bool = False) -> dict:
        """The adapters config (a bottleneck config, reduction factor applied) as a dict; with ``probe``, also add
        it to a one-layer copy of the model, so anything the library rejects fails here."""
        from adapters import AdapterConfig, BnConfig

        cfg = self.config
        overrides = {"reduction_factor": cfg.reduction_factor} if cfg.reduction_factor is not None else {}
        try:
            config = AdapterConfig.load(cfg.adapter, **overrides)
        except Exception as exc:  # the library's own message (unknown name, missing or bad fields)
            raise SpecError(f"strategy.adapter: rejected by adapters: {type(exc).__name__}: {exc}") from None
        if not isinstance(config, BnConfig):
            raise SpecError(f"strategy.adapter: {type(config).__name__} is not a bottleneck adapter; MoP's fusion "
                            "mixes bottleneck adapters (seq_bn, double_seq_bn, par_bn, ...)")
        if probe:
            probe_adapter(run.model_path, config)
        return config.to_dict()

    # -- the pipeline --------------------------------------------------------------------------- #
    def stages(self, run) -> list[Stage]:
        from kinject.plugins.evidence.stage import compare_stage
        from kinject.api import evaluate_stage, finetune_stage

        cfg = self.config
        model = run.model_ref()
        kg = KGSettings(source=self.source_ref(run), max_length=cfg.kg_max_length, max_triples=cfg.kg_max_triples)
        stages = [finetune_stage(run), evaluate_stage(run, "finetune", export=False)] if cfg.baseline else []
        # the knowledge side reads the model's weights and tokenizer only: the task's pooling and max length
        # would re-key (and retrain) identical adapters
        knowledge_model = model.model_copy(update={"pooling": "cls", "max_length": cfg.kg_max_length})
        stages.append(Stage(name=PARTITION, body=partition_body, artifacts=("partition.json",), config=PartitionConfig(
            model=knowledge_model, kg=kg, partitions=cfg.partitions, seed=cfg.kg_seed, shuffle=cfg.shuffle,
            cross_part=cfg.cross_part)))
        adapter = self.adapter_config(run)
        training = self.adapter_training(run)
        names = [f"mop-adapter-{i}" for i in range(cfg.partitions)]
        stages += [Stage(name=name, body=adapter_body, inputs=(PARTITION,), libraries=LIBRARIES, spread=True,
                         config=PartAdapterConfig(model=knowledge_model, kg=kg, part=i, adapter=adapter,
                                                  training=training, seed=cfg.kg_seed,
                                                  heldout_fraction=cfg.heldout_fraction,
                                                  bidirectional=cfg.bidirectional, entity_head=cfg.entity_head))
                   for i, name in enumerate(names)]
        mixture = {"mixture": cfg.mixture, "tau": cfg.tau, "top_k": cfg.top_k, "loss_coef": cfg.moe_loss_coef}
        stages.append(Stage(name="mop-finetune", body=fusion_body, inputs=tuple(names), produces_model=True,
                            libraries=LIBRARIES, config=FusionConfig(
                                model=model, task=run.task_ref(), training=run.spec.training.for_training(),
                                seed=run.spec.seed, adapters=names, mixture=mixture, joint=cfg.finetune == "joint")))
        evaluate = evaluate_stage(run, "mop-finetune", name="mop-evaluate")
        stages.append(dataclasses.replace(evaluate, libraries=LIBRARIES, code=("kinject.plugins.mop.fusion",)))
        if cfg.analysis:
            splits = evaluate.config.splits or list(run.task.eval_splits)
            stages.append(Stage(name="mop-analysis", body=analysis_body, inputs=(*names, "mop-finetune"),
                                libraries=LIBRARIES, artifacts=("partition-adapters.json", "partition-adapters.png",
                                                                "mixture.json", "mixture.png"),
                                config=AnalysisConfig(task=run.task_ref(), model_stage="mop-finetune", adapters=names,
                                                      split="test" if "test" in splits else splits[-1],
                                                      examples=cfg.mixture_examples,
                                                      max_length=run.spec.model.max_length,
                                                      attn_implementation=run.spec.model.attn_implementation,
                                                      batch_size=run.spec.training.eval_batch_size)))
        if cfg.baseline:
            stages.append(compare_stage(run, baseline="evaluate", other="mop-evaluate", name="mop-compare",
                                        labels=("finetune", f"mop-{cfg.mixture}")))
        return stages

    def adapter_training(self, run):
        """Partition-adapter optimisation (reference: AdamW, weight decay 0.01, warm-up 0.1); the run's training
        settings are for the task, so they do not reach (or key) the knowledge side, except how often to log
        and checkpoint."""
        from kinject.api import TrainingSpec

        cfg, task = self.config, run.spec.training
        return TrainingSpec(epochs=cfg.adapter_epochs, max_steps=cfg.adapter_max_steps,
                            learning_rate=cfg.adapter_learning_rate, batch_size=cfg.adapter_batch_size,
                            weight_decay=0.01, warmup_ratio=0.1, group_by_length=True, save_steps=task.save_steps,
                            logging_steps=task.logging_steps, bf16=task.bf16)

    @classmethod
    def load_task_model(cls, model_dir, head, attn_implementation: str = "sdpa"):
        """A MoP ``model/`` folder as a ready task model (adapters + mixture active, evaluation mode)."""
        from .fusion import load_fused_model

        return load_fused_model(model_dir, head.kind if head is not None else None, attn_implementation)


_COUNTS: dict[tuple, tuple[int, int]] = {}


def count_graph(ref, env, cap: int | None) -> tuple[int, int]:
    """(entities, triples) of a source reference's KG under ``cap`` - what the partition stage will see. Streamed
    (only the entity vocabulary is held); remembered per source fingerprint for the process (``--repeats``)."""
    from kinject.plugins.knowledge.kg.intern import Vocab, intern_triples

    key = (ref.name, ref.fingerprint, cap)
    if key not in _COUNTS:
        vocab = Vocab()
        source_env = dataclasses.replace(env, data_dir=Path(ref.data_dir), limit=None)
        rows = sum(len(chunk[0]) for chunk in intern_triples(ref.build().iter_triples(source_env), vocab, cap=cap))
        _COUNTS[key] = (len(vocab.entities), rows)
    return _COUNTS[key]


def probe_adapter(model_path: str, config) -> None:
    """Add ``config`` to a one-layer copy of the model and run it once; SpecError on anything the library rejects."""
    import adapters
    import torch
    from transformers import AutoConfig, AutoModel

    from kinject.api import offline

    from .knowledge import quiet_activation

    model_config = AutoConfig.from_pretrained(model_path, local_files_only=offline())
    model_config.num_hidden_layers = 1
    try:
        model = AutoModel.from_config(model_config)
        adapters.init(model)
        model.add_adapter("probe", config=config)
        with quiet_activation():
            model.set_active_adapters("probe")
        with torch.no_grad():
            model(input_ids=torch.ones(1, 2, dtype=torch.long))
    except Exception as exc:
        raise SpecError(f"strategy.adapter: rejected by adapters for this model: {type(exc).__name__}: {exc}") from None
