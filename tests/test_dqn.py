"""DQN's loss against a reference computed here by hand, one sample at a time."""

from __future__ import annotations

import pytest
import torch

from daskrl.algo.dqn_loss import dqn_loss, dqn_targets, dueling


def _batch(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    B, A = 6, 3
    return {
        "q": torch.randn(B, A, generator=g, dtype=torch.float64, requires_grad=True),
        "actions": torch.tensor([0, 2, 1, 1, 0, 2]),
        "rewards": torch.randn(B, generator=g, dtype=torch.float64) * 3,
        "discounts": torch.tensor([0.99, 0.0, 0.9801, 0.99, 0.970299, 0.0], dtype=torch.float64),
        "next_online": torch.randn(B, A, generator=g, dtype=torch.float64),
        "next_target": torch.randn(B, A, generator=g, dtype=torch.float64),
        "weights": torch.rand(B, generator=g, dtype=torch.float64) + 0.1,
    }


def _reference(b: dict[str, torch.Tensor], double: bool, delta: float) -> tuple[float, list[float]]:
    """Per sample: the target, the TD error and its Huber loss, in plain Python."""
    total, errors = 0.0, []
    for i in range(len(b["actions"])):
        online, target = b["next_online"][i].tolist(), b["next_target"][i].tolist()
        picker = online if double else target
        best = max(range(len(picker)), key=lambda a: picker[a])
        y = b["rewards"][i].item() + b["discounts"][i].item() * target[best]
        td = y - b["q"][i, b["actions"][i]].item()
        huber = 0.5 * td * td if abs(td) <= delta else delta * (abs(td) - 0.5 * delta)
        total += b["weights"][i].item() * huber
        errors.append(td)
    return total / len(errors), errors


@pytest.mark.parametrize("double", [True, False])
@pytest.mark.parametrize("delta", [1.0, float("inf")])
def test_dqn_loss_matches_a_hand_computation(double, delta):
    b = _batch()
    targets = dqn_targets(b["rewards"], b["discounts"], b["next_target"], b["next_online"] if double else None)
    out = dqn_loss(b["q"], b["actions"], targets, b["weights"], huber_delta=delta)
    loss, errors = _reference(b, double, delta)
    assert out.loss.item() == pytest.approx(loss, rel=1e-12)
    assert out.td_errors.tolist() == pytest.approx(errors, rel=1e-12)
    out.loss.backward()  # only the taken actions' Q-values get a gradient
    grad = b["q"].grad
    untaken = torch.ones_like(grad, dtype=torch.bool).scatter_(1, b["actions"].reshape(-1, 1), False)
    assert torch.all(grad[untaken] == 0) and torch.all(grad[~untaken] != 0)


def test_double_q_differs_from_plain_where_the_networks_disagree():
    b = _batch(1)
    b["next_online"] = torch.tensor([[1.0, 0.0, 0.0]] * 6, dtype=torch.float64)
    b["next_target"] = torch.tensor([[0.0, 5.0, 0.0]] * 6, dtype=torch.float64)
    double = dqn_targets(b["rewards"], b["discounts"], b["next_target"], b["next_online"])
    plain = dqn_targets(b["rewards"], b["discounts"], b["next_target"], None)
    assert torch.allclose(double, b["rewards"]) and torch.allclose(plain, b["rewards"] + 5 * b["discounts"])


def test_dueling_combines_value_and_centered_advantages():
    v = torch.tensor([1.0, -2.0])
    a = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 3.0]])
    assert dueling(v, a).tolist() == [[0.0, 1.0, 2.0], [-3.0, -3.0, 0.0]]
