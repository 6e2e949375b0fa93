"""DoKTra's pieces on small tensors and tiny models: the AB hinge (by hand, torchdistill's formula, the paper's
Eq. 5), confidence penalty, KD, L_AT, the projection, the paired collator with two tokenizers, the switch at
gamma and a frozen teacher."""

from __future__ import annotations

import math

import pytest
import torch

from kinject.plugins.doktra.losses import (ab_loss_sum, abd_loss, confidence_penalty_loss, entropy, kd_loss,
                                           sign_disagreements)

MULTI, SINGLE = "multi_label_classification", "single_label_classification"


# -- activation-boundary loss --------------------------------------------------------------------------- #
def test_ab_loss_matches_values_computed_by_hand():
    student = torch.tensor([[1.5, 0.5, -0.2, -2.0], [0.0, 3.0, -1.0, 0.9]])
    teacher = torch.tensor([[1.0, 1.0, -1.0, -1.0], [0.0, 2.0, -3.0, 0.5]])
    # row 1: active+past margin 0 | active, (0.5-1)^2 = .25 | inactive, (-0.2+1)^2 = .64 | inactive, past -1: 0
    # row 2: teacher 0 counts inactive: (0+1)^2 = 1 | 0 | s = -1 is not > -1: 0 | active, (0.9-1)^2 = .01
    assert ab_loss_sum(student, teacher, 1.0).item() == pytest.approx(0.25 + 0.64 + 1.0 + 0.01)
    assert abd_loss(student, teacher, 1.0).item() == pytest.approx(1.90 / 1000 / 2)
    # margin 0.5: row 1 -> (0 + 0 + (0.3)^2 + 0), row 2 -> ((0.5)^2 + 0 + 0 + 0)
    assert ab_loss_sum(student, teacher, 0.5).item() == pytest.approx(0.09 + 0.25)


def torchdistill_alt_act_transfer_loss(source, target, margin, reduction="mean"):
    """torchdistill's AltActTransferLoss (losses/mid_level.py), written out: sum over elements, then / batch."""
    loss = ((source + margin) ** 2 * ((source > -margin) & (target <= 0)).float() +
            (source - margin) ** 2 * ((source <= margin) & (target > 0)).float())
    loss = torch.abs(loss).sum()
    return loss / source.shape[0] if reduction == "mean" else loss


def test_ab_loss_equals_torchdistill_and_the_papers_equation_5():
    generator = torch.Generator().manual_seed(0)
    student, teacher = torch.randn(6, 20, generator=generator) * 2, torch.randn(6, 20, generator=generator)
    for margin in (0.5, 1.0, 2.0):
        ours = ab_loss_sum(student, teacher, margin)
        assert ours.item() == pytest.approx(torchdistill_alt_act_transfer_loss(student, teacher, margin, "sum").item())
        assert (abd_loss(student, teacher, margin, scale=1.0).item() ==
                pytest.approx(torchdistill_alt_act_transfer_loss(student, teacher, margin).item()))
        rho = (teacher > 0).float()  # Eq. 5: || rho(T) relu(mu - S) + (1 - rho(T)) relu(mu + S) ||_2^2
        eq5 = (rho * torch.relu(margin - student) + (1 - rho) * torch.relu(margin + student)).pow(2).sum()
        assert ours.item() == pytest.approx(eq5.item(), rel=1e-6)


def test_ab_loss_gradient_moves_student_signs_towards_the_teachers():
    teacher = torch.tensor([[1.0, -1.0, 2.0, -0.5]])
    student = torch.tensor([[-0.3, 0.4, 0.2, -2.0]], requires_grad=True)
    ab_loss_sum(student, teacher, 1.0).backward()
    assert student.grad[0, 0] < 0 and student.grad[0, 1] > 0 and student.grad[0, 2] < 0  # descent raises / lowers
    assert student.grad[0, 3] == 0  # already past the margin on the teacher's side


def test_sign_disagreements_count_neurons_of_different_sign():
    student = torch.tensor([[1.0, -1.0, 0.0, 2.0], [0.5, 0.5, 0.5, 0.5]])
    teacher = torch.tensor([[2.0, 1.0, -3.0, -1.0], [1.0, 1.0, 1.0, 1.0]])
    assert sign_disagreements(student, teacher).tolist() == [2, 0]  # 0 counts as not active, as the reference


# -- confidence penalty, KD --------------------------------------------------------------------------- #
def test_entropy_of_uniform_outputs_is_log_k_and_log_2_per_label():
    assert entropy(torch.zeros(3, 5), SINGLE).tolist() == pytest.approx([math.log(5)] * 3)
    assert entropy(torch.zeros(2, 4), MULTI).tolist() == pytest.approx([math.log(2)] * 2)
    assert entropy(torch.tensor([[30.0, -30.0]]), SINGLE).item() == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("problem_type", [SINGLE, MULTI])
def test_confidence_penalty_lowers_mean_max_probability_on_a_fixed_batch(problem_type):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 8, generator=generator)
    labels = torch.randint(0, 3, (32,), generator=generator) if problem_type == SINGLE else \
        (torch.rand(32, 3, generator=generator) > 0.5).float()

    def trained_confidence(beta: float) -> float:
        torch.manual_seed(0)
        layer = torch.nn.Linear(8, 3)
        optimizer = torch.optim.Adam(layer.parameters(), lr=0.05)
        for _ in range(200):
            optimizer.zero_grad()
            confidence_penalty_loss(layer(x), labels, problem_type, beta).backward()
            optimizer.step()
        with torch.no_grad():
            logits = layer(x)
        probs = torch.softmax(logits, -1).max(-1).values if problem_type == SINGLE else \
            torch.maximum(torch.sigmoid(logits), 1 - torch.sigmoid(logits))
        return probs.mean().item()

    plain, penalised = trained_confidence(0.0), trained_confidence(0.7)
    assert penalised < plain - 0.02


def test_confidence_penalty_is_ce_minus_beta_entropy():
    logits, labels = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 0.0]]), torch.tensor([0, 2])
    ce = torch.nn.functional.cross_entropy(logits, labels)
    expected = ce - 0.3 * entropy(logits, SINGLE).mean()
    assert confidence_penalty_loss(logits, labels, SINGLE, 0.3).item() == pytest.approx(expected.item())
    assert confidence_penalty_loss(logits, labels, SINGLE, 0.0).item() == pytest.approx(ce.item())


def test_kd_loss_is_temperature_scaled_kl():
    student, teacher = torch.tensor([[1.0, 0.0, -1.0]]), torch.tensor([[0.0, 2.0, 0.0]])
    assert kd_loss(teacher, teacher, SINGLE, 2.0).item() == pytest.approx(0.0, abs=1e-7)
    p, q = torch.softmax(teacher / 2, -1), torch.softmax(student / 2, -1)
    assert kd_loss(student, teacher, SINGLE, 2.0).item() == pytest.approx(4 * (p * (p / q).log()).sum().item())
    pt, ps = torch.sigmoid(teacher / 2), torch.sigmoid(student / 2)
    binary = pt * (pt / ps).log() + (1 - pt) * ((1 - pt) / (1 - ps)).log()
    assert kd_loss(student, teacher, MULTI, 2.0).item() == pytest.approx(4 * binary.mean().item(), rel=1e-5)


# -- projection ---------------------------------------------------------------------------------------- #
def test_projection_is_identity_on_equal_widths_else_frozen_seeded_xavier_with_bias_001():
    from kinject.plugins.doktra.features import make_projection

    assert make_projection(32, 32, "auto", 0) is None
    layer = make_projection(48, 32, "auto", 7)
    assert layer.weight.shape == (32, 48) and not layer.weight.requires_grad
    assert torch.all(layer.bias == 0.01) and layer.weight.abs().max() <= math.sqrt(6 / (48 + 32))
    assert torch.equal(layer.weight, make_projection(48, 32, "random", 7).weight)
    assert not torch.equal(layer.weight, make_projection(48, 32, "random", 8).weight)
    assert make_projection(32, 32, "random", 0) is not None
    connector = make_projection(48, 32, "learned", 0)  # student (32) -> teacher (48), trained
    assert connector.weight.shape == (48, 32) and connector.weight.requires_grad


def test_a_map_on_the_teacher_side_gets_no_gradient_from_the_ab_loss_but_a_connector_does():
    from kinject.plugins.doktra.features import align, make_projection

    student, teacher = torch.randn(4, 32, requires_grad=True), torch.randn(4, 48)
    fixed = make_projection(48, 32, "random", 0).requires_grad_(True)
    abd_loss(*align(student, teacher, fixed, "random"), 1.0).backward()
    assert fixed.weight.grad is None or not fixed.weight.grad.any()  # the teacher enters through its signs only
    connector = make_projection(48, 32, "learned", 0)
    abd_loss(*align(student, teacher, connector, "learned"), 1.0).backward()
    assert connector.weight.grad.abs().sum() > 0 and student.grad.abs().sum() > 0
