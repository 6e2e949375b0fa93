"""The `stilt` strategy: intermediate task(s) first, then the target (Phang et al. 2018; Jeong & Hwang).

Stages: ``stilt-intermediate-1-<task>`` [-> ``stilt-intermediate-2-<task>`` ...] -> ``stilt-finetune`` (the target)
-> ``stilt-evaluate``. Each intermediate stage is keyed by the model, its own task config, its training settings, the
seed and the previous intermediate's key, never by the target: targets that share an intermediate train it once.
Every stage puts a fresh head on the encoder it receives, so task types mix; an intermediate whose model has no
pooler (token heads, mean pooling) keeps the pooler of the model it started from (:mod:`.pooler`), so a sequence
target starts from the same pooler as the no-intermediate baseline. The target's stages are not the shared
``finetune`` + ``evaluate``: they start from the intermediate model.

No report stage and no compare stage: a run has no baseline of its own; STILT's evidence is across runs, the
target x intermediate transfer matrix against the `finetune` baseline runs (``kinject stilt matrix``,
:mod:`.matrix`). Checks and builders in :mod:`.plan`; the intermediate stage's config in :mod:`.pooler` (it
overrides ``save_model``, so it lives beside the code it calls).
"""

from __future__ import annotations

from typing import ClassVar

from kinject.api import Stage, Strategy

from .config import StiltConfig
from .plan import Resolved, intermediate_stages, resolve, target_stages


class StiltStrategy(Strategy):
    """STILT: fine-tune on intermediate task(s), then on the target; the encoder carries over, heads are new."""

    Config: ClassVar = StiltConfig
    #: Jeong & Hwang: "the hyperparameters of fine-tuning are the same as those of PubMedBERT" (BLURB's protocol)
    protocols: ClassVar[dict] = {"paper": {"training": {"warmup_ratio": 0.1, "selection": "best"}},
                                 "quick": {"strategy": {"intermediate": [{"name": "hpo-isa", "train_pairs": 64,
                                                                          "dev_pairs": 32, "test_pairs": 32,
                                                                          "split_seed": 1}]},
                                           "training": {"max_steps": 30}}}  # kinject run --quick

    def validate(self, run) -> Resolved:
        """Everything that can fail, before any stage (:func:`.plan.resolve`): the intermediate tasks, configured
        and with their data checked."""
        super().validate(run)
        return resolve(run, self.config)

    def stages(self, run) -> list[Stage]:
        intermediate = intermediate_stages(run, self.config, run.resolved)
        return intermediate + target_stages(run, intermediate[-1].name)
