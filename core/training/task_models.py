"""Task models: an encoder with a fresh task head (:func:`build_task_model`), and a saved one loaded back
(:func:`load_task_model`), with mean pooling and a task's model transform recorded in config.json."""

from __future__ import annotations

import json
from pathlib import Path

from kinject.api import Head


class MeanPooler:
    """Replaces a model's [CLS] pooler: the mean of the token states over the attention mask.

    The mask reaches it through a forward pre-hook on the encoder (BERT's pooler is called without it). The
    choice is saved as ``kinject_pooling`` in config.json, and :func:`load_task_model` puts it back.
    """

    @staticmethod
    def install(model) -> None:
        import torch
        from torch import nn

        from kinject.tasks import masked_mean

        base = model.base_model
        if getattr(base, "pooler", None) is None:
            from kinject.api import SpecError

            raise SpecError(f"model.pooling: mean pooling replaces the [CLS] pooler, and "
                            f"{type(base).__name__} has none")

        class Pool(nn.Module):
            mask: torch.Tensor | None = None

            def forward(self, hidden):
                return hidden.mean(1) if self.mask is None else masked_mean(hidden, self.mask)

        pool = Pool()

        def keep_mask(module, args, kwargs):
            pool.mask = kwargs.get("attention_mask")
            if pool.mask is None and len(args) > 1:
                pool.mask = args[1]

        base.pooler = pool
        base.register_forward_pre_hook(keep_mask, with_kwargs=True)
        model.config.kinject_pooling = "mean"


def build_task_model(encoder_path: str | Path, head: Head, attn_implementation: str = "sdpa", seed: int = 0,
                     revision: str | None = None, layers: int | None = None, pooling: str = "cls"):
    """The encoder at ``encoder_path`` with a freshly initialised task head (linear layer); sequence heads
    pool the [CLS] state (``cls``, through the model's pooler) or the mean of the token states (``mean``)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

    from kinject.api import load_encoder

    encoder = load_encoder(str(encoder_path), revision=revision, attn_implementation=attn_implementation,
                           layers=layers)
    config = encoder.config
    config.num_labels = head.num_labels
    config.problem_type = head.problem_type
    if head.labels:
        config.id2label = dict(enumerate(head.labels))
        config.label2id = {name: i for i, name in enumerate(head.labels)}
    cls = AutoModelForTokenClassification if head.kind == "token" else AutoModelForSequenceClassification
    torch.manual_seed(seed)
    model = cls.from_config(config, attn_implementation=attn_implementation)
    missing, unexpected = model.base_model.load_state_dict(encoder.state_dict(), strict=False)
    bad = [k for k in missing if not k.startswith("pooler.")]
    unexpected = [k for k in unexpected if not k.startswith("pooler.")]  # token heads have no pooler
    if bad or unexpected:
        raise RuntimeError(f"encoder weights do not fit the task model: missing {bad[:5]}, unexpected {unexpected[:5]}")
    if pooling == "mean" and head.kind == "sequence":
        MeanPooler.install(model)
    return apply_head_model(model, head.model, head)


def apply_head_model(model, reference: str | None, head: Head | None):
    """``model`` through the task's model transform ``reference`` ("module:function", :attr:`Head.model`), which is
    recorded in config.json (``kinject_head_model``) so that loading applies it again; None: ``model`` as it is."""
    if not reference:
        return model
    import importlib

    module, _, function = reference.partition(":")
    transform = getattr(importlib.import_module(module), function)
    model = transform(model, head)
    model.config.kinject_head_model = reference
    return model


def check_head_model(model_dir: Path, saved: str | None, head: Head | None) -> None:
    """A model trained with one task model transform is not scored as another (e.g. a bi-encoder read as a
    cross-encoder): one line, exit 2."""
    if head is None or (saved or None) == (head.model or None):
        return
    from kinject.api import SpecError

    trained = f"trained with the task model {saved}" if saved else "trained with the plain linear head"
    wanted = f"the task model {head.model}" if head.model else "the plain linear head"
    raise SpecError(f"{model_dir}: {trained}; the task is set up for {wanted} (check the task's settings, "
                    f"e.g. task.encoder)")


def load_task_model(model_dir: Path, head: Head, attn_implementation: str = "sdpa"):
    """A saved task model (sequence or token head) from a stage's ``model/`` folder, as ``from_pretrained`` loads it.

    A model that needs more (MoP: adapters and their fusion) is loaded by its evaluate stage's config:
    ``EvaluateConfig.load_model`` overridden (the one route; `kinject eval` finds it through the run's run.json).
    """
    from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

    from kinject.api import offline

    saved = json.loads((Path(model_dir) / "config.json").read_text())
    check_head_model(model_dir, saved.get("kinject_head_model"), head)
    held = saved.get("adapters") if isinstance(saved.get("adapters"), dict) else {}
    if held.get("adapters") or held.get("fusions"):
        from kinject.api import KinjectError

        raise KinjectError(f"{model_dir}: holds adapters (config.json 'adapters'), which from_pretrained drops; "
                           "evaluate it from the run folder that saved it (its run.json names the stage config "
                           "that loads it)")
    cls = AutoModelForTokenClassification if head.kind == "token" else AutoModelForSequenceClassification
    model = cls.from_pretrained(str(model_dir), local_files_only=offline(), attn_implementation=attn_implementation)
    if getattr(model.config, "kinject_pooling", "cls") == "mean" and head.kind == "sequence":
        MeanPooler.install(model)
    return apply_head_model(model, saved.get("kinject_head_model"), head)


def save_model(model, tokenizer, directory: Path) -> None:
    model.save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)
