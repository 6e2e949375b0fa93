"""The `kimera` strategy: head importance and mask -> KG retraining under the mask -> fine-tune -> evaluate.

Stages (each cached, each a declared config + module-level body in :mod:`.stages`): ``finetune`` +
``evaluate`` (phase 1, shared with the finetune baseline and evaluated as the baseline), ``kimera-mask-<kind>``
(importance + iterative mask search), ``kimera-retrain`` (multi-task KG training from the pre-trained model),
``kimera-finetune`` + ``kimera-evaluate`` (phase 3), ``kimera-analysis`` (heatmaps, table 3) and
``kimera-compare`` (KIMERA vs the phase-1 baseline, paired over the same test examples). Baselines in the
same plugin: ``variant: finetune`` and ``variant: pruned`` (the hard mask's heads physically removed with
``prune_heads``, then fine-tuned and evaluated). Controls: ``variant: random`` (``kimera-mask-random``: the
searched hard mask's count of redundant heads at random places), ``mask_file`` (a given mask instead of the
search), ``until: mask``, ``score_seed``, ``retrain_seed`` and ``kg_heldout`` (docs/kimera.md).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import ClassVar

from kinject.api import DataError, SpecError, Stage, Strategy

from .config import KimeraConfig
from .stages import (AnalysisConfig, GivenMaskConfig, MaskConfig, PrunedConfig, RandomMaskConfig, RetrainConfig,
                     ScoringConfig, analysis_body, given_mask_body, mask_body, pruned_body, random_mask_body,
                     retrain_body)

log = logging.getLogger("kinject")


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
        if cfg.kg_heldout:
            from .heldout import split_source

            split_source(self.kg_source(run), dataclasses.replace(run.env, limit=None), cfg.kg_max_triples,
                         cfg.kg_heldout, self.retrain_seed(run))
        if cfg.mask_file:
            self.given_masks(run)
            return
        if cfg.retrain_seed is not None and cfg.settings()[0] != "none":
            log.warning("strategy.retrain_seed: the mask is searched on this run's phase-1 model and data, which "
                        "depend on the run seed, so runs with other seeds still retrain; set strategy.mask_file to "
                        "share one retraining")
        if cfg.variant == "finetune" or cfg.settings()[0] == "none" and cfg.variant != "pruned":
            return
        split = cfg.score_split or run.task.eval_splits[0]
        if split not in (*run.task.eval_splits, run.task.train_split):
            raise SpecError(f"strategy.score_split: task {run.task.name!r} has no split {split!r}")
        names = run.task.metric_names()
        metric = cfg.search_metric or run.task.selection_metric()
        if metric not in names:
            raise SpecError(f"strategy.search_metric: task {run.task.name!r} reports no {metric!r} "
                            f"(has: {', '.join(names)})")

    def given_masks(self, run) -> dict[str, list]:
        """The tables of strategy.mask_file the run uses: its mask of the variant's kind (hard for pruned and
        random) and, when present, the first-round importance (needed by the analysis). Checked against the
        model's layers and heads."""
        from transformers import AutoConfig

        from kinject.api import offline

        from .masks import load_mask

        cfg = self.config
        path = Path(cfg.mask_file).expanduser()
        path = path / "masks.json" if path.is_dir() else path
        if not path.is_file():
            raise SpecError(f"strategy.mask_file: {cfg.mask_file} is neither a masks.json nor a directory with one")
        model = AutoConfig.from_pretrained(run.model_path, local_files_only=offline())
        shape = (run.spec.model.layers or model.num_hidden_layers, model.num_attention_heads)
        kind = self.mask_kind()
        names = [kind] + (["importance"] if cfg.analysis or "importance" in json.loads(path.read_text()) else [])
        try:
            return {name: load_mask(path, name, shape).tolist() for name in names}
        except DataError as exc:
            hint = " (the analysis needs it; or set strategy.analysis=false)" if "importance" in exc.reason else ""
            raise DataError(f"strategy.mask_file: {exc.reason}{hint}", exc.path, exc.line) from None

    def mask_kind(self) -> str:
        """hard or soft: the kind of mask the variant searches (pruned and random: hard)."""
        return "hard" if self.config.variant in ("pruned", "random") else self.config.settings()[0]

    def retrain_seed(self, run) -> int:
        return self.config.retrain_seed if self.config.retrain_seed is not None else run.spec.seed

    def kg_source(self, run):
        """The knowledge source retraining reads: the run's, else the default HPO sample (built and checked once)."""
        if run.sources:
            return run.sources[0]
        if getattr(self, "_default_source", None) is None:
            from kinject.plugins.knowledge.sources.hpo import default_source

            self._default_source = default_source(self.config.kg_max_triples)
            self._default_source.check(run.env)
        return self._default_source

    # -- stage builders ------------------------------------------------------------------------ #
    def _scoring(self, run) -> ScoringConfig:
        cfg = self.config
        return ScoringConfig(task=run.task_ref(), split=cfg.score_split or run.task.eval_splits[0],
                             examples=cfg.score_examples, importance_examples=cfg.importance_examples,
                             batch_size=cfg.score_batch_size,
                             metric=cfg.search_metric or run.task.selection_metric(),
                             max_length=run.spec.model.max_length, attn=run.spec.model.attn_implementation,
                             seed=cfg.score_seed)

    def mask_stage(self, run, kind: str) -> Stage:
        from kinject.api import ModelRef, model_fingerprint

        cfg = self.config
        if cfg.mask_file:  # same name as the search: what follows reads kimera-mask-<kind> either way
            config = GivenMaskConfig(kind=kind, masks=self.given_masks(run), path=str(Path(cfg.mask_file).resolve()))
            return Stage(name=f"kimera-mask-{kind}", body=given_mask_body, config=config, artifacts=("masks.json",))
        given = None
        if cfg.finetuned_model:
            path = str(Path(cfg.finetuned_model).resolve())
            given = ModelRef(name=cfg.finetuned_model, fingerprint=model_fingerprint(path, path, None), path=path)
        config = MaskConfig(kind=kind, tau=cfg.tau, rho=cfg.rho, max_rounds=cfg.max_rounds, scoring=self._scoring(run),
                            finetuned_model=given)
        return Stage(name=f"kimera-mask-{kind}", body=mask_body, config=config,
                     inputs=() if given else ("finetune",), artifacts=("masks.json", "search.json"))

    def random_mask_stage(self) -> Stage:
        return Stage(name="kimera-mask-random", body=random_mask_body,
                     config=RandomMaskConfig(seed=self.config.mask_seed), inputs=("kimera-mask-hard",),
                     artifacts=("random.json",))

    def retrain_stage(self, run, mask: str, forward: bool, scratch: bool, mask_stage: str | None) -> Stage:
        from kinject.api import SourceRef

        cfg = self.config
        if run.sources:
            source = run.source_refs()[0]
        else:
            source = SourceRef.of(self.kg_source(run), dataclasses.replace(run.env, limit=None))
        training = run.spec.training
        config = RetrainConfig(
            model=run.model_ref(), seed=self.retrain_seed(run), mask=mask, mask_stage=mask_stage, forward_mask=forward,
            from_scratch=scratch, source=source,
            kg={k: v for k, v in cfg.model_dump(mode="json").items() if k.startswith("kg_")},
            alphas=cfg.alphas.model_dump(), task_sampling=cfg.task_sampling, pooling=cfg.pooling,
            other_params=cfg.other_params,
            weight_decay=training.weight_decay, warmup_ratio=training.warmup_ratio, bf16=bool(training.bf16),
            save_steps=min(training.save_steps, max(cfg.kg_steps // 2, 1)))
        return Stage(name="kimera-retrain", body=retrain_body, config=config,
                     inputs=(mask_stage,) if mask_stage else (), produces_model=True)

    def pruned_encoder_stage(self, run) -> Stage:
        return Stage(name="kimera-pruned-encoder", body=pruned_body, config=PrunedConfig(model=run.model_ref()),
                     inputs=("kimera-mask-hard",), produces_model=True)

    def analysis_stage(self, run, kind: str, mask_stage: str) -> Stage:
        config = AnalysisConfig(kind=kind, scoring=self._scoring(run), mask_stage=mask_stage)
        return Stage(name="kimera-analysis", body=analysis_body, config=config,
                     inputs=(mask_stage, "kimera-finetune"), artifacts=("analysis.json", "plots"))

    # -- the pipeline --------------------------------------------------------------------------- #
    def stages(self, run) -> list[Stage]:
        from kinject.plugins.evidence.stage import compare_stage
        from kinject.api import evaluate_stage, finetune_stage

        cfg = self.config
        if cfg.variant == "finetune":
            return [finetune_stage(run), evaluate_stage(run, "finetune")]
        if cfg.until == "mask":  # the mask search only (and the random draw after it)
            stages = ([] if cfg.finetuned_model else [finetune_stage(run)]) + [self.mask_stage(run, self.mask_kind())]
            return stages + ([self.random_mask_stage()] if cfg.variant == "random" else [])
        phase1 = [] if cfg.finetuned_model else [finetune_stage(run), evaluate_stage(run, "finetune", export=False)]
        if cfg.variant == "pruned":
            stages = [*phase1, self.mask_stage(run, "hard"), self.pruned_encoder_stage(run),
                      finetune_stage(run, "kimera-pruned-finetune", init_from="kimera-pruned-encoder"),
                      evaluate_stage(run, "kimera-pruned-finetune", name="kimera-pruned-evaluate")]
            final = "kimera-pruned-evaluate"
        else:
            mask, forward, scratch = cfg.settings()
            stages = [*phase1, self.mask_stage(run, mask)] if mask != "none" else list(phase1)
            mask_stage = f"kimera-mask-{mask}" if mask != "none" else None
            if cfg.variant == "random":
                stages.append(self.random_mask_stage())
                mask_stage = "kimera-mask-random"
            stages += [self.retrain_stage(run, mask, forward, scratch, mask_stage),
                       finetune_stage(run, "kimera-finetune", init_from="kimera-retrain"),
                       evaluate_stage(run, "kimera-finetune", name="kimera-evaluate")]
            if cfg.analysis and mask_stage:
                stages.append(self.analysis_stage(run, mask, mask_stage))
            final = "kimera-evaluate"
        if phase1:
            stages.append(compare_stage(run, baseline="evaluate", other=final, name="kimera-compare",
                                        labels=("finetune", f"kimera-{cfg.variant}")))
        return stages
