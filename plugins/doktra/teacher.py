"""The teacher: its reference and checks (run before any stage, from :mod:`.strategy`), a given fine-tuned teacher
taken with its head put in the task's label order, and its frozen outputs cached once per example (the stage
bodies and their configs at the end; CTT is the shared fine-tune body with :class:`.trainers.CalibratedConfig`)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field

from kinject.api import (NOT_KEYED, Head, KinjectError, ModelRef, SpecError, StageConfig, StageContext, TaskRef,
                         is_main_process)

from .features import featurize_one_to_one, model_outputs


def classifier_labels(config: Any) -> list[str] | None:
    """The label names of a fine-tuned sequence classifier's config (None: not a sequence classifier)."""
    if not any(a.endswith("ForSequenceClassification") for a in (config.architectures or [])):
        return None
    id2label = {int(k): v for k, v in (config.id2label or {}).items()}
    return [id2label[i] for i in sorted(id2label)]


def teacher_ref(source, env, model) -> ModelRef:
    """The teacher as stage configs hold it: name, weights fingerprint, where it resolved; its max length,
    attention kernel and sequence pooling are the run's (``model``: the run's ModelSpec)."""
    path = source.model_path(env)
    return ModelRef(name=source.config.model, fingerprint=source.fingerprint(env), revision=source.config.revision,
                    max_length=model.max_length, attn_implementation=model.attn_implementation,
                    pooling=model.pooling, path=path)


def check_teacher(ref: ModelRef, head: Head, field: str, mode: str) -> bool:
    """Whether the teacher is used as it is (True) or fine-tuned with CTT (False); a fine-tuned teacher whose
    label set (or problem type) differs from the task's is a SpecError naming ``field``."""
    from transformers import AutoConfig

    from kinject.api import offline

    try:
        config = AutoConfig.from_pretrained(ref.path, revision=ref.revision, local_files_only=offline())
    except (OSError, ValueError) as exc:
        raise SpecError(f"{field}: cannot read the teacher's config ({str(exc).splitlines()[0]})") from None
    labels = classifier_labels(config)
    if mode == "always" or (mode == "auto" and labels is None):
        return False
    if labels is None:
        raise SpecError(f"{field}: {ref.name!r} is not a fine-tuned sequence classifier, but strategy.train_teacher "
                        "is 'never'; use train_teacher: auto to fine-tune it with CTT")
    if sorted(labels) != sorted(head.labels):
        raise SpecError(f"{field}: the fine-tuned teacher {ref.name!r} predicts labels {sorted(labels)}, the task "
                        f"has {sorted(head.labels)}; fine-tune it on this task (strategy.train_teacher: always) or "
                        "pass a teacher trained on it")
    kind = getattr(config, "problem_type", None)
    if kind and kind != head.problem_type:
        raise SpecError(f"{field}: the teacher {ref.name!r} is a {kind} model, the task is {head.problem_type}")
    return True


def load_classifier(ref: ModelRef):
    from transformers import AutoModelForSequenceClassification

    from kinject.api import offline

    try:
        return AutoModelForSequenceClassification.from_pretrained(
            ref.path, revision=ref.revision, local_files_only=offline(), attn_implementation=ref.attn_implementation)
    except OSError as exc:
        raise KinjectError(f"teacher {ref.name!r}: cannot load ({str(exc).splitlines()[0]})") from None


def align_labels(model, head: Head) -> list[int]:
    """Reorder the classifier's output rows to the task's label order (in place); returns the old index of
    each new row. The output layer is the last Linear map with one output per label."""
    import torch

    names = classifier_labels(model.config) or []
    if sorted(names) != sorted(head.labels):
        raise KinjectError(f"teacher labels {sorted(names)} differ from the task's {sorted(head.labels)}")
    order = [names.index(label) for label in head.labels]
    if order != list(range(len(order))):
        layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and m.out_features == len(order)]
        if not layers:
            raise KinjectError(f"teacher: no output layer with {len(order)} outputs to reorder")
        with torch.no_grad():
            layers[-1].weight.copy_(layers[-1].weight[order])
            if layers[-1].bias is not None:
                layers[-1].bias.copy_(layers[-1].bias[order])
    model.config.id2label = dict(enumerate(head.labels))
    model.config.label2id = {name: i for i, name in enumerate(head.labels)}
    model.config.problem_type = head.problem_type
    return order


# -- stage bodies ------------------------------------------------------------------------------------ #
class ImportConfig(StageConfig):
    """Take a teacher that is already fine-tuned on the task: its head's rows put in the task's label order."""

    teacher: ModelRef
    task: TaskRef


class TeacherOutputsConfig(StageConfig):
    """The frozen teacher's last-layer [CLS] and logits for every training example and the L_AT examples."""

    task: TaskRef
    teacher_stage: str
    max_length: int
    attn_implementation: str = "sdpa"
    analysis_split: str
    analysis_examples: int
    batch_size: int = Field(64, json_schema_extra=NOT_KEYED)


def import_body(cfg: ImportConfig, ctx: StageContext) -> None:
    from kinject.training import save_model

    task, env = cfg.task.build(), cfg.task.environment(ctx)
    model = load_classifier(cfg.teacher)
    order = align_labels(model, task.head(env))
    if is_main_process():
        save_model(model, cfg.teacher.load_tokenizer(), ctx.out / "model")
        (ctx.out / "teacher.json").write_text(json.dumps({"teacher": cfg.teacher.name, "label_order": order},
                                                         indent=2))


def teacher_outputs_body(cfg: TeacherOutputsConfig, ctx: StageContext) -> None:
    import time

    from safetensors.numpy import save_file

    from kinject.training import load_task_model
    from kinject.api import load_tokenizer

    task, env = cfg.task.build(), cfg.task.environment(ctx)
    directory = ctx.inputs[cfg.teacher_stage] / "model"
    tokenizer = load_tokenizer(str(directory))
    model = load_task_model(directory, task.head(env), cfg.attn_implementation)
    arrays, info = {}, {}
    for part, examples in (("train", task.examples(task.train_split, env)),
                           ("analysis", task.examples(cfg.analysis_split, env)[:cfg.analysis_examples])):
        start = time.perf_counter()
        features = featurize_one_to_one(task, tokenizer, examples, cfg.max_length, env)
        arrays[f"{part}.cls"], arrays[f"{part}.logits"] = model_outputs(model, features, task.collator(tokenizer),
                                                                        cfg.batch_size)
        info[part] = {"examples": len(features), "seconds": round(time.perf_counter() - start, 3)}
    if is_main_process():
        save_file(arrays, str(ctx.out / "outputs.safetensors"))
        (ctx.out / "outputs.json").write_text(json.dumps(info, indent=2))
