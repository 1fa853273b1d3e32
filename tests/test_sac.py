"""SAC's losses against references computed here by hand, and the soft update."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from daskrl.algo.sac_loss import actor_loss, alpha_loss, critic_loss, sac_targets, soft_update


def _batch(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    B = 5

    def r() -> torch.Tensor:
        return torch.randn(B, generator=g, dtype=torch.float64)

    return {"q1": r().requires_grad_(), "q2": r().requires_grad_(), "rewards": r(), "next_q1": r(), "next_q2": r(),
            "next_log_prob": r(), "q1_pi": r(), "q2_pi": r(), "log_prob": r(),
            "discounts": torch.tensor([0.99, 0.0, 0.99, 0.9801, 0.99], dtype=torch.float64),
            "weights": torch.rand(B, generator=g, dtype=torch.float64) + 0.5}


def test_sac_critic_loss_matches_a_hand_computation():
    b, alpha = _batch(), 0.3
    targets = sac_targets(b["rewards"], b["discounts"], b["next_q1"], b["next_q2"], b["next_log_prob"], alpha)
    out = critic_loss(b["q1"], b["q2"], targets, b["weights"])
    total, errors = 0.0, []
    for i in range(5):
        soft_next = min(b["next_q1"][i].item(), b["next_q2"][i].item()) - alpha * b["next_log_prob"][i].item()
        y = b["rewards"][i].item() + b["discounts"][i].item() * soft_next
        e1, e2 = y - b["q1"][i].item(), y - b["q2"][i].item()
        total += b["weights"][i].item() * (e1 * e1 + e2 * e2) / 2
        errors.append((e1 + e2) / 2)
    assert out.loss.item() == pytest.approx(total / 5, rel=1e-12)
    assert out.td_errors.tolist() == pytest.approx(errors, rel=1e-12)
    out.loss.backward()
    assert b["q1"].grad is not None and b["q2"].grad is not None


def test_sac_actor_and_temperature_losses_match_a_hand_computation():
    b, alpha = _batch(2), 0.2
    want = sum(alpha * b["log_prob"][i].item() - min(b["q1_pi"][i].item(), b["q2_pi"][i].item())
               for i in range(5)) / 5
    assert actor_loss(b["q1_pi"], b["q2_pi"], b["log_prob"], alpha).item() == pytest.approx(want, rel=1e-12)
    log_alpha = torch.tensor(math.log(alpha), dtype=torch.float64, requires_grad=True)
    target_entropy = -2.0
    loss = alpha_loss(log_alpha, b["log_prob"], target_entropy)
    want = -sum(math.log(alpha) * (b["log_prob"][i].item() + target_entropy) for i in range(5)) / 5
    assert loss.item() == pytest.approx(want, rel=1e-12)
    loss.backward()  # entropy (-log_prob) above the target: alpha goes down (gradient of log alpha is positive)
    assert log_alpha.grad.item() == pytest.approx(-(b["log_prob"].mean().item() + target_entropy), rel=1e-12)


def test_soft_update_moves_targets_by_tau():
    torch.manual_seed(0)
    online, target = nn.Linear(3, 2), nn.Linear(3, 2)
    before = target.weight.detach().clone()
    soft_update(target, online, 0.05)
    assert torch.allclose(target.weight, 0.95 * before + 0.05 * online.weight.detach())
    soft_update(target, online, 1.0)
    assert torch.equal(target.weight, online.weight)
