"""The `kimera` strategy: head importance and mask -> KG retraining under the mask -> fine-tune -> evaluate.

Stages (each cached, each a declared config + module-level body in :mod:`.stages`): ``finetune`` +
``evaluate`` (phase 1, shared with the finetune baseline and evaluated as the baseline), ``kimera-mask-<kind>``
(importance + iterative mask search), ``kimera-retrain`` (multi-task KG training from the pre-trained model),
``kimera-finetune`` + ``kimera-evaluate`` (phase 3), ``kimera-analysis`` (heatmaps, table 3) and
``kimera-compare`` (KIMERA vs the phase-1 baseline, paired over the same test examples). Baselines in the
same plugin: ``variant: finetune`` and ``variant: pruned`` (the hard mask's heads physically removed with
``prune_heads``, then fine-tuned and evaluated).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar

from kinject.errors import SpecError
from kinject.interfaces import Stage, Strategy

from .config import KimeraConfig
from .stages import (AnalysisConfig, MaskConfig, PrunedConfig, RetrainConfig, ScoringConfig, analysis_body,
                     mask_body, pruned_body, retrain_body)


class KimeraStrategy(Strategy):
    """KIMERA: retrain the attention heads a task needs least on KG triples, then fine-tune (+ baselines)."""

    Config: ClassVar = KimeraConfig
    consumes: ClassVar[frozenset[str]] = frozenset({"triples"})

    # -- validation (runs in prepare, before any stage) ----------------------------------------- #
    def validate(self, run) -> None:
        super().validate(run)
        if len(run.sources) > 1:
            raise SpecError("sources: KIMERA retrains on one knowledge graph; merge the graphs into one "
                            f"`triples` source (got {len(run.sources)} sources)")
        cfg = self.config
        if cfg.finetuned_model and not (Path(cfg.finetuned_model) / "config.json").exists():
            raise SpecError(f"strategy.finetuned_model: {cfg.finetuned_model} is not a model directory")
        if cfg.variant == "finetune" or cfg.settings()[0] == "none" and cfg.variant != "pruned":
            return
        split = cfg.score_split or run.task.eval_splits[0]
        if split not in (*run.task.eval_splits, run.task.train_split):
            raise SpecError(f"strategy.score_split: task {run.task.name!r} has no split {split!r}")
        from kinject.stages import probe_metric_names

        names = probe_metric_names(run.task, run.env, run.model_ref())
        metric = cfg.search_metric or run.task.selection_metric()
        if metric not in names:
            raise SpecError(f"strategy.search_metric: task {run.task.name!r} reports no {metric!r} "
                            f"(has: {', '.join(names)})")

    # -- stage builders ------------------------------------------------------------------------ #
    def _scoring(self, run) -> ScoringConfig:
        cfg = self.config
        return ScoringConfig(task=run.task_ref(), split=cfg.score_split or run.task.eval_splits[0],
                             examples=cfg.score_examples, importance_examples=cfg.importance_examples,
                             batch_size=cfg.score_batch_size,
                             metric=cfg.search_metric or run.task.selection_metric(),
                             max_length=run.spec.model.max_length, attn=run.spec.model.attn_implementation)

    def mask_stage(self, run, kind: str) -> Stage:
        from kinject.refs import ModelRef, model_fingerprint

        cfg = self.config
        given = None
        if cfg.finetuned_model:
            path = str(Path(cfg.finetuned_model).resolve())
            given = ModelRef(name=cfg.finetuned_model, fingerprint=model_fingerprint(path, path, None), path=path)
        config = MaskConfig(kind=kind, tau=cfg.tau, rho=cfg.rho, max_rounds=cfg.max_rounds, scoring=self._scoring(run),
                            finetuned_model=given)
        return Stage(name=f"kimera-mask-{kind}", body=mask_body, config=config,
                     inputs=() if given else ("finetune",), artifacts=("masks.json", "search.json"))

    def retrain_stage(self, run, mask: str, forward: bool, scratch: bool) -> Stage:
        from kinject.refs import SourceRef

        cfg = self.config
        if run.sources:
            source = run.source_refs()[0]
        else:
            from kinject.sources.hpo import default_source

            built = default_source(cfg.kg_max_triples)
            built.check(run.env)
            source = SourceRef.of(built, dataclasses.replace(run.env, limit=None))
        training = run.spec.training
        config = RetrainConfig(
            model=run.model_ref(), seed=run.spec.seed, mask=mask, forward_mask=forward, from_scratch=scratch,
            source=source, kg={k: v for k, v in cfg.model_dump(mode="json").items() if k.startswith("kg_")},
            alphas=cfg.alphas.model_dump(), task_sampling=cfg.task_sampling, pooling=cfg.pooling,
            other_params=cfg.other_params,
            weight_decay=training.weight_decay, warmup_ratio=training.warmup_ratio, bf16=training.bf16)
        return Stage(name="kimera-retrain", body=retrain_body, config=config,
                     inputs=(f"kimera-mask-{mask}",) if mask != "none" else (), produces_model=True)

    def pruned_encoder_stage(self, run) -> Stage:
        return Stage(name="kimera-pruned-encoder", body=pruned_body, config=PrunedConfig(model=run.model_ref()),
                     inputs=("kimera-mask-hard",), produces_model=True)

    def analysis_stage(self, run, kind: str) -> Stage:
        return Stage(name="kimera-analysis", body=analysis_body, config=AnalysisConfig(kind=kind,
                                                                                        scoring=self._scoring(run)),
                     inputs=(f"kimera-mask-{kind}", "kimera-finetune"), artifacts=("analysis.json", "plots"))

    # -- the pipeline --------------------------------------------------------------------------- #
    def stages(self, run) -> list[Stage]:
        from kinject.stages import compare_stage, evaluate_stage, finetune_stage

        cfg = self.config
        if cfg.variant == "finetune":
            return [finetune_stage(run), evaluate_stage(run, "finetune")]
        phase1 = [] if cfg.finetuned_model else [finetune_stage(run), evaluate_stage(run, "finetune", export=False)]
        if cfg.variant == "pruned":
            stages = [*phase1, self.mask_stage(run, "hard"), self.pruned_encoder_stage(run),
                      finetune_stage(run, "kimera-pruned-finetune", init_from="kimera-pruned-encoder"),
                      evaluate_stage(run, "kimera-pruned-finetune", name="kimera-pruned-evaluate")]
            final = "kimera-pruned-evaluate"
        else:
            mask, forward, scratch = cfg.settings()
            stages = [*phase1, self.mask_stage(run, mask)] if mask != "none" else list(phase1)
            stages += [self.retrain_stage(run, mask, forward, scratch),
                       finetune_stage(run, "kimera-finetune", init_from="kimera-retrain"),
                       evaluate_stage(run, "kimera-finetune", name="kimera-evaluate")]
            if cfg.analysis and mask != "none":
                stages.append(self.analysis_stage(run, mask))
            final = "kimera-evaluate"
        if phase1:
            stages.append(compare_stage(run, baseline="evaluate", other=final, name="kimera-compare",
                                        labels=("finetune", f"kimera-{cfg.variant}")))
        return stages
