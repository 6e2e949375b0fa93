"""The teacher: resolved through the `model` knowledge source, checked before any stage, and - when it is
already a fine-tuned sequence classifier - taken with its head put in the task's label order."""

from __future__ import annotations

from typing import Any

from kinject.errors import KinjectError, SpecError
from kinject.interfaces import Head
from kinject.refs import ModelRef


def classifier_labels(config: Any) -> list[str] | None:
    """The label names of a fine-tuned sequence classifier's config (None: not a sequence classifier)."""
    if not any(a.endswith("ForSequenceClassification") for a in (config.architectures or [])):
        return None
    id2label = {int(k): v for k, v in (config.id2label or {}).items()}
    return [id2label[i] for i in sorted(id2label)]


def teacher_ref(source, env, max_length: int, attn: str) -> ModelRef:
    """The teacher as stage configs hold it: name, weights fingerprint, where it resolved."""
    from kinject.refs import model_fingerprint

    path = source.model_path(env)
    return ModelRef(name=source.config.model, fingerprint=model_fingerprint(source.config.model, path,
                                                                             source.config.revision),
                    revision=source.config.revision, max_length=max_length, attn_implementation=attn, path=path)


def check_teacher(ref: ModelRef, head: Head, field: str, mode: str) -> bool:
    """Whether the teacher is used as it is (True) or fine-tuned with CTT (False); a fine-tuned teacher whose
    label set (or problem type) differs from the task's is a SpecError naming ``field``."""
    from transformers import AutoConfig

    from kinject.models import offline

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

    from kinject.models import offline

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
