"""The `kgtext` strategy: the run's knowledge graph as sentences -> continued masked-LM -> fine-tune."""

from __future__ import annotations

from typing import ClassVar

from kinject.api import Stage, Strategy
from kinject.training import evaluate_stage, finetune_stage
from kinject.knowledge import missing_mlm_head, mlm_model_ref, mlm_stage, pack_stage, triples_source

from .config import KgTextConfig
from .stages import CoverageConfig, VerbaliseConfig
from .verbalise import coverage_body, verbalise_body


class KgTextStrategy(Strategy):
    """Verbalise the KG, continue masked-LM training on the sentences, fine-tune (a third-party example)."""

    Config: ClassVar = KgTextConfig
    consumes = frozenset({"triples"})

    def validate(self, run):
        super().validate(run)
        return triples_source(run, self.config.max_triples)  # the run's graph, else the embedded HPO sample

    def stages(self, run) -> list[Stage]:
        cfg = self.config
        texts = Stage(name="kgtext-verbalise", body=verbalise_body, config=VerbaliseConfig(
            source=run.resolved, template=cfg.template, max_triples=cfg.max_triples))
        pack = pack_stage(run, "kgtext-pack", texts_stage=texts.name)
        budget = dict(learning_rate=cfg.mlm_learning_rate, batch_size=cfg.mlm_batch_size)
        head = None
        if missing_mlm_head(mlm_model_ref(run, run.spec.model.max_length)):
            head = mlm_stage(run, "kgtext-head", pack, mode="head", steps=cfg.head_steps, **budget)
        mlm = mlm_stage(run, "kgtext-mlm", pack, start_stage=head, steps=cfg.mlm_steps,
                        epochs=run.knowledge_epochs, **budget)  # knowledge.epochs, when the run asks for a dose
        coverage = Stage(name="kgtext-coverage", body=coverage_body, inputs=(texts.name,),
                         artifacts=("coverage.json",), config=CoverageConfig(
                             task=run.task_ref(), texts_stage=texts.name, split=run.task.eval_splits[-1]))
        return [texts, coverage, pack, *([head] if head else []), mlm,
                finetune_stage(run, "kgtext-finetune", init_from=mlm.name), evaluate_stage(run, "kgtext-finetune")]
