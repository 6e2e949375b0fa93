"""DoKTra's losses: confidence penalty (Pereyra et al. 2017), activation-boundary hinge (Heo et al. 2019),
classic KD (Hinton et al. 2015), and the sign-disagreement count L_AT (Choi et al. 2022, Eq. 4).

Single-label tasks use softmax / cross-entropy; multi-label tasks use one sigmoid per label (binary
cross-entropy, binary entropy, binary KL), averaged over labels so beta means the same per decision.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

MULTI = "multi_label_classification"


def task_loss(logits: torch.Tensor, labels: torch.Tensor, problem_type: str) -> torch.Tensor:
    """Mean cross-entropy (softmax) or mean binary cross-entropy over labels (multi-label)."""
    if problem_type == MULTI:
        return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))
    return F.cross_entropy(logits, labels.view(-1))


def entropy(logits: torch.Tensor, problem_type: str) -> torch.Tensor:
    """Per-example entropy H(p) of the predicted distribution (multi-label: mean binary entropy per label)."""
    if problem_type == MULTI:
        p = torch.sigmoid(logits)
        return -(p * F.logsigmoid(logits) + (1 - p) * F.logsigmoid(-logits)).mean(dim=-1)
    log_p = F.log_softmax(logits, dim=-1)
    return -(log_p.exp() * log_p).sum(dim=-1)


def confidence_penalty_loss(logits: torch.Tensor, labels: torch.Tensor, problem_type: str,
                            beta: float) -> torch.Tensor:
    """L = mean(CE - beta H(p)) (Eq. 2): beta > 0 penalises over-confident outputs."""
    loss = task_loss(logits, labels, problem_type)
    return loss - beta * entropy(logits, problem_type).mean() if beta else loss


def ab_loss_sum(student: torch.Tensor, teacher: torch.Tensor, margin: float) -> torch.Tensor:
    """Heo et al.'s alternative (hinge) activation-transfer loss, summed over every element (Eq. 5):
    a neuron active in the teacher (> 0) pulls the student's value above +margin, an inactive one below
    -margin; squared hinge, zero once the student is past the margin on the right side."""
    active = teacher > 0
    push_up = (student - margin).pow(2) * (active & (student <= margin))
    push_down = (student + margin).pow(2) * (~active & (student > -margin))
    return (push_up + push_down).sum()


def abd_loss(student: torch.Tensor, teacher: torch.Tensor, margin: float, scale: float = 1000.0) -> torch.Tensor:
    """The AB loss as the DoKTra reference scales it: sum / ``scale`` / batch size."""
    return ab_loss_sum(student, teacher, margin) / scale / student.shape[0]


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, problem_type: str,
            temperature: float) -> torch.Tensor:
    """T^2 KL(p_teacher^T || p_student^T), mean over the batch (multi-label: binary KL, mean over labels too)."""
    t = temperature
    if problem_type == MULTI:
        p_t = torch.sigmoid(teacher_logits / t)
        log_s1, log_s0 = F.logsigmoid(student_logits / t), F.logsigmoid(-student_logits / t)
        log_t1, log_t0 = F.logsigmoid(teacher_logits / t), F.logsigmoid(-teacher_logits / t)
        kl = p_t * (log_t1 - log_s1) + (1 - p_t) * (log_t0 - log_s0)
        return kl.mean() * t * t
    return F.kl_div(F.log_softmax(student_logits / t, dim=-1), F.log_softmax(teacher_logits / t, dim=-1),
                    reduction="batchmean", log_target=True) * t * t


def sign_disagreements(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """L_AT per example (Eq. 4): how many neurons are active (> 0) in one model and not in the other."""
    return ((student > 0) != (teacher > 0)).sum(dim=-1)
