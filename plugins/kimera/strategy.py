"""The `kimera` strategy: head importance and mask -> KG retraining under the mask -> fine-tune -> evaluate.

Stages (each cached): ``finetune`` + ``evaluate`` (phase 1, shared with the finetune baseline and evaluated as the
baseline), ``kimera-mask-<kind>`` (importance + iterative mask search) + ``kimera-search-report`` (each round's
paired interval), ``kimera-retrain`` (multi-task KG training from the pre-trained model), ``kimera-finetune`` +
``kimera-evaluate`` (phase 3), ``kimera-report`` (heatmaps, table 3) and ``kimera-compare`` (KIMERA vs the
phase-1 baseline, paired over the same test examples). Baselines in
the same plugin: ``variant: finetune`` and ``variant: pruned`` (the hard mask's heads physically removed with
``prune_heads``, then fine-tuned and evaluated). Controls: ``variant: random`` (``kimera-mask-random``: the
searched hard mask's count of redundant heads at random places), ``mask_file`` (a given mask instead of the
search), ``until: mask``, ``score_seed``, ``retrain_seed`` and ``kg_heldout`` (docs/kimera.md). Checks and
builders in :mod:`.plan`, configs in :mod:`.stages`.
"""

from __future__ import annotations

from typing import ClassVar

from kinject.api import Stage, Strategy
from kinject.training import evaluate_stage, finetune_stage

from .config import VARIANTS, KimeraConfig
from .plan import (EVALUATE, PHASE1, PRUNED_EVALUATE, Resolved, mask_stages, pruned_stages, resolve,
                   retraining_stages)


def variant_label(cfg: KimeraConfig) -> str:
    """How a comparison names the arm: kimera-<variant>, with the mask when a setting overrides the variant's
    (``--set strategy.mask=soft`` on the default variant is kimera-hard-masksoft, not kimera-hard)."""
    default = VARIANTS.get(cfg.variant, ("none", False, False))
    mask, forward, scratch = cfg.settings()
    parts = [f"kimera-{cfg.variant}"]
    parts += [f"mask{mask}"] if cfg.mask is not None and mask != default[0] else []
    parts += [f"forward{str(forward).lower()}"] if cfg.forward_mask is not None and forward != default[1] else []
    parts += ["scratch"] if cfg.from_scratch is not None and scratch != default[2] else []
    return "-".join(parts)


class KimeraStrategy(Strategy):
    """KIMERA: retrain the attention heads a task needs least on KG triples, then fine-tune (+ baselines)."""

    Config: ClassVar = KimeraConfig
    consumes: ClassVar[frozenset[str]] = frozenset({"triples"})
    #: Winter et al. 2022, section 4: tau from {0.95, 0.98, 0.99} (0.98), rho 0.1, the full knowledge graph, all
    #: alphas 1 (retraining "for a maximum of 5 epochs, most converged after one": kg_steps stays the budget)
    protocols: ClassVar[dict] = {"paper": {"strategy": {"tau": 0.98, "rho": 0.1, "kg_max_triples": None}},
                                 "quick": {"strategy": {"kg_max_triples": 2000, "kg_steps": 20, "score_examples": 64,
                                                        "max_rounds": 2},
                                           "training": {"max_steps": 30}}}  # kinject run --quick

    def validate(self, run) -> Resolved:
        """Everything that can fail, before any stage; returns the KG retraining reads (the run's source, else
        the embedded HPO graph sampled to ``kg_max_triples``) and the mask of ``mask_file``."""
        super().validate(run)
        return resolve(run, self.config)

    def stages(self, run) -> list[Stage]:
        from kinject.evidence import compare_stage

        cfg, resolved = self.config, run.resolved
        if cfg.variant == "finetune":
            return [finetune_stage(run), evaluate_stage(run, PHASE1)]
        phase1 = [] if cfg.finetuned_model else [finetune_stage(run)]
        if cfg.until == "mask":  # the mask search only (and the random draw after it)
            return phase1 + mask_stages(run, cfg, resolved)[0]
        phase1 += [evaluate_stage(run, PHASE1, export=False)] if phase1 else []
        if cfg.variant == "pruned":
            stages, final = phase1 + pruned_stages(run, cfg, resolved), PRUNED_EVALUATE
        else:
            stages, final = phase1 + retraining_stages(run, cfg, resolved), EVALUATE
        if phase1:
            stages.append(compare_stage(run, baseline="evaluate", other=final, name="kimera-compare",
                                        labels=("finetune", variant_label(cfg))))
        return stages
