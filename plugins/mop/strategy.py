"""The `mop` strategy: Mixture-of-Partitions (Meng et al., EMNLP 2021).

Stages (each cached): ``finetune`` + ``evaluate`` (the plain baseline, the `finetune` strategy's own stages and cache
keys), ``mop-partition`` (METIS over the KG's entity graph), ``mop-adapter-<i>`` for each part i used (one bottleneck
adapter per part, base frozen; spread over the processes of a ``torchrun`` launch), ``mop-finetune`` (base + adapters +
mixture + task head), ``mop-evaluate``, ``mop-report`` (adapter accuracy per part, mixture weights) and
``mop-compare`` (MoP vs the baseline, paired). Checks and builders in :mod:`.plan`, configs in
:mod:`.stages`.
"""

from __future__ import annotations

from typing import ClassVar

from kinject.api import Stage, Strategy
from kinject.training import evaluate_stage, finetune_stage

from .config import MopConfig
from .plan import EVALUATE, Resolved, fusion_stages, knowledge_stages, report_stage, resolve, variant_label


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
                     "adapter_learning_rate": 1e-4, "adapter_batch_size": 256, "adapter_warmup_ratio": 0.0,
                     "adapter_epochs": 1, "kg_max_length": 64, "fusion_regularization": False},
        "training": {"learning_rate": 1e-5, "head_learning_rate": None, "epochs": 25, "patience": 5,
                     "selection": "best", "batch_size": 16, "warmup_ratio": 0.1}},
        "quick": {"strategy": {"partitions": 4, "kg_max_triples": 2000, "adapter_max_steps": 20},
                  "training": {"max_steps": 30}}}  # kinject run --quick

    def validate(self, run) -> Resolved:
        """Everything that can fail, before any stage (:func:`.plan.resolve`): the KG and the adapters config."""
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
