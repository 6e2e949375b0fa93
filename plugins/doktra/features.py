"""The distillation feature format: one example = the student's encoding of its text, plus either the teacher's
encoding of the same text (``teacher_input_ids``, ``teacher_attention_mask``, ...) or the frozen teacher's
cached outputs for it (``teacher_cls``, ``teacher_logits``). :class:`PairedCollator` pads each encoding with its
own tokenizer, so teacher and student may tokenise differently (different vocabularies and lengths).
"""

from __future__ import annotations

from typing import Any

import numpy as np

TEACHER = "teacher_"
ENCODING_KEYS = ("input_ids", "attention_mask", "token_type_ids")
CACHED_KEYS = ("teacher_cls", "teacher_logits")


def pair_features(student: list[dict], teacher: list[dict] | None = None,
                  cached: dict[str, np.ndarray] | None = None) -> list[dict]:
    """Student features (from ``task.featurize``) joined example by example with the teacher's encoding of the
    same examples (``teacher``) and/or the teacher's cached outputs (``cached``: name -> array [N, ...])."""
    out = [dict(f) for f in student]
    if teacher is not None:
        if len(teacher) != len(student):
            raise ValueError(f"{len(teacher)} teacher features for {len(student)} student features")
        for row, t in zip(out, teacher):
            row.update({TEACHER + k: t[k] for k in ENCODING_KEYS if k in t})
    for name, values in (cached or {}).items():
        if len(values) != len(student):
            raise ValueError(f"{len(values)} cached {name} rows for {len(student)} student features")
        for row, value in zip(out, values):
            row[name] = np.asarray(value, dtype=np.float32)
    return out


class PairedCollator:
    """Pads the student's encoding (and ``labels``) with the student's tokenizer and the ``teacher_*`` encoding
    with the teacher's; stacks cached teacher outputs as float tensors. Other keys (``length``) are dropped."""

    def __init__(self, student_tokenizer, teacher_tokenizer=None):
        from transformers import DataCollatorWithPadding

        self.student = DataCollatorWithPadding(student_tokenizer)
        self.teacher = DataCollatorWithPadding(teacher_tokenizer) if teacher_tokenizer is not None else None

    def __call__(self, features: list[dict[str, Any]]) -> dict:
        import torch

        keep = (*ENCODING_KEYS, "labels")
        batch = dict(self.student([{k: f[k] for k in keep if k in f} for f in features]))
        if self.teacher is not None and TEACHER + "input_ids" in features[0]:
            teacher = self.teacher([{k: f[TEACHER + k] for k in ENCODING_KEYS if TEACHER + k in f} for f in features])
            batch.update({TEACHER + k: v for k, v in teacher.items()})
        for name in CACHED_KEYS:
            if name in features[0]:
                batch[name] = torch.as_tensor(np.stack([np.asarray(f[name], dtype=np.float32) for f in features]))
        return batch


def encoder_inputs(batch: dict, prefix: str = "") -> dict:
    """The model inputs of one side of a paired batch (``prefix`` ``teacher_`` for the teacher's)."""
    return {k: batch[prefix + k] for k in ENCODING_KEYS if prefix + k in batch}


def cls_and_logits(model, inputs: dict):
    """(last-layer [CLS] hidden state, logits) of a sequence classifier: the [CLS] vector before any pooler."""
    outputs = model(**inputs, output_hidden_states=True)
    return outputs.hidden_states[-1][:, 0], outputs.logits


def model_outputs(model, features: list[dict], collator, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """[CLS] vectors and logits of ``model`` (eval mode, no gradients) for ``features``, in their order.

    Batches are formed longest first, so each pads only to its own longest row."""
    import torch

    order = np.argsort([-len(f["input_ids"]) for f in features], kind="stable")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    cls_parts, logit_parts = [], []
    with torch.inference_mode():
        from kinject.tasks import progress

        for lo in progress(range(0, len(order), batch_size), "teacher outputs", unit=" batches"):
            batch = collator([{k: features[i][k] for k in ENCODING_KEYS if k in features[i]}
                              for i in order[lo:lo + batch_size]])
            cls, logits = cls_and_logits(model, {k: v.to(device) for k, v in encoder_inputs(batch).items()})
            cls_parts.append(cls.float().cpu().numpy())
            logit_parts.append(logits.float().cpu().numpy())
    model.train(was_training)
    out = []
    for parts in (cls_parts, logit_parts):
        values = np.empty((len(order), parts[0].shape[1]), np.float32)
        values[order] = np.concatenate(parts)
        out.append(values)
    return out[0], out[1]


def make_projection(teacher_width: int, student_width: int, kind: str, seed: int):
    """The map between the two [CLS] widths: None (identity) when ``kind`` is auto and the widths match.

    auto/random: teacher -> student, Xavier-uniform weights and bias 0.01 as the reference initialises it, seeded
    and frozen. learned: student -> teacher (Heo et al.'s connector), same init, trained with the student - the
    AB loss reads the teacher side only through its signs, so a map there would never receive a gradient."""
    import torch

    if kind == "auto" and teacher_width == student_width:
        return None
    learned = kind == "learned"
    layer = torch.nn.Linear(student_width, teacher_width) if learned else torch.nn.Linear(teacher_width, student_width)
    generator = torch.Generator().manual_seed(seed)
    torch.nn.init.xavier_uniform_(layer.weight, generator=generator)
    torch.nn.init.constant_(layer.bias, 0.01)
    layer.requires_grad_(learned)
    return layer


def align(student, teacher, projection, kind: str):
    """The pair of vectors the AB loss and L_AT compare: (student, projected teacher) for a fixed map,
    (connector(student), teacher) for a learned one, the two [CLS] vectors as they are without a map."""
    if projection is None:
        return student, teacher
    return (projection(student), teacher) if kind == "learned" else (student, projection(teacher))


def featurize_one_to_one(task, tokenizer, examples: list[dict], max_length: int, env) -> list[dict]:
    """``task.featurize`` with the check that example i became feature i (DoKTra pairs them by position)."""
    features = task.featurize(tokenizer, examples, max_length, env)
    if len(features) != len(examples):
        raise RuntimeError(f"task {task.name!r} made {len(features)} features of {len(examples)} examples")
    return features
