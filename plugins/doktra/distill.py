"""The teacher side of the distillation stage (cached outputs or a live frozen model, the width projection)
and L_AT, the number of [CLS] neurons whose sign differs between student and teacher (paper, Eq. 4)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class TeacherSide:
    """What the distillation stage knows of the teacher."""

    features: list[dict]  # the training features, paired with the teacher's encoding or cached outputs
    available: bool = False  # False: refinement only (no-abd), no L_AT
    tokenizer: Any = None  # live teacher: its tokenizer (the collator pads its encoding with it)
    online: Any = None  # live teacher model (eval mode, frozen), run on every batch
    projection: Any = None  # teacher [CLS] -> student width (None: identity)
    analysis_cls: np.ndarray | None = None  # cached teacher [CLS] of the L_AT examples

    def analysis(self, task, env, examples: list[dict], max_length: int, batch_size: int) -> np.ndarray:
        """The teacher's [CLS] vectors of the L_AT examples (cached, or computed by the live teacher)."""
        if self.analysis_cls is not None:
            if len(self.analysis_cls) != len(examples):
                raise RuntimeError(f"{len(self.analysis_cls)} cached teacher vectors for {len(examples)} examples")
            return self.analysis_cls
        from .features import model_outputs
        from .stages import featurize_one_to_one

        features = featurize_one_to_one(task, self.tokenizer, examples, max_length, env)
        return model_outputs(self.online, features, task.collator(self.tokenizer), batch_size)[0]

    def project(self, cls: np.ndarray):
        import torch

        values = torch.as_tensor(cls, dtype=torch.float32)
        if self.projection is None:
            return values
        with torch.no_grad():
            return self.projection.cpu()(values)

    def save_projection(self, path: Path) -> None:
        if self.projection is not None:
            from safetensors.torch import save_file

            save_file({k: v.detach().cpu().contiguous() for k, v in self.projection.state_dict().items()}, str(path))


def prepare_teacher(cfg, ctx, task, env, examples: list[dict], features: list[dict], student_width: int) -> TeacherSide:
    """Pair the student's training features with the teacher: its cached outputs (``cfg.outputs_stage``) or its
    own encoding of the same texts for a live teacher (``cfg.teacher_stage``); build the width projection."""
    from .features import make_projection, pair_features

    if cfg.objective == "none":
        return TeacherSide(features)
    if cfg.outputs_stage:
        from safetensors.numpy import load_file

        arrays = load_file(str(ctx.inputs[cfg.outputs_stage] / "outputs.safetensors"))
        name = "cls" if cfg.objective == "abd" else "logits"
        side = TeacherSide(pair_features(features, cached={f"teacher_{name}": arrays[f"train.{name}"]}), True,
                           analysis_cls=arrays["analysis.cls"])
        width = arrays["train.cls"].shape[1]
    else:
        from kinject.models import load_tokenizer
        from kinject.stages import load_task_model

        from .stages import featurize_one_to_one

        directory = ctx.inputs[cfg.teacher_stage] / "model"
        tokenizer = load_tokenizer(str(directory))
        model = load_task_model(directory, task.head(env), cfg.attn_implementation).eval().requires_grad_(False)
        teacher_features = featurize_one_to_one(task, tokenizer, examples, cfg.max_length, env)
        side = TeacherSide(pair_features(features, teacher=teacher_features), True, tokenizer, model)
        width = model.config.hidden_size
    # kd never trains a projection; it needs one (random) only to measure L_AT across different widths
    kind = "random" if cfg.objective == "kd" and cfg.projection == "learned" else cfg.projection
    side.projection = make_projection(width, student_width, kind, cfg.seed)
    return side


def l_at(model, tokenizer, task, env, examples: list[dict], cfg, teacher: TeacherSide) -> float:
    """Mean over ``examples`` of the number of student [CLS] neurons whose sign differs from the (projected)
    teacher's."""
    import torch

    from .features import model_outputs
    from .losses import sign_disagreements
    from .stages import featurize_one_to_one

    features = featurize_one_to_one(task, tokenizer, examples, cfg.max_length, env)
    student, _ = model_outputs(model, features, task.collator(tokenizer), cfg.batch_size)
    target = teacher.project(teacher.analysis(task, env, examples, cfg.max_length, cfg.batch_size))
    return float(sign_disagreements(torch.as_tensor(student), target).float().mean())
