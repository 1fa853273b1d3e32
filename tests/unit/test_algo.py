import math

import numpy as np
import pytest
import torch

from daskrl.algo.appo.advantages import gae, vtrace
from daskrl.algo.appo.loss import LossOutput, appo_loss, policy_lag_mask

T, B = 9, 3


def _rollout(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    dones = torch.zeros(T, B, dtype=torch.bool)
    dones[3, 0] = True
    dones[4, 1] = True
    dones[5, 0] = True
    dones[7, 2] = True
    behaviour = -torch.rand(T, B, generator=g, dtype=torch.float64) * 2.0
    return {
        "behaviour": behaviour,
        "target": behaviour + torch.randn(T, B, generator=g, dtype=torch.float64) * 0.8,
        "rewards": torch.randn(T, B, generator=g, dtype=torch.float64),
        "values": torch.randn(T, B, generator=g, dtype=torch.float64),
        "bootstrap": torch.randn(B, generator=g, dtype=torch.float64),
        "dones": dones,
    }


def _vtrace_args(ro: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    return [ro[k] for k in ("behaviour", "target", "rewards", "values", "bootstrap", "dones")]


def _vtrace_reference(mu, pi, r, v, boot, d, gamma, rho_bar, c_bar):
    """Plain-Python V-trace: v_s from the paper's explicit sum, pg advantages from v_{s+1}."""
    n_t, n_b = len(r), len(r[0])
    vs = [[0.0] * n_b for _ in range(n_t)]
    pg = [[0.0] * n_b for _ in range(n_t)]
    for b in range(n_b):
        rho = [math.exp(pi[t][b] - mu[t][b]) for t in range(n_t)]
        clipped_rho = [min(rho_bar, x) for x in rho]
        c = [min(c_bar, x) for x in rho]
        disc = [gamma * (0.0 if d[t][b] else 1.0) for t in range(n_t)]
        v_next = [v[t + 1][b] if t + 1 < n_t else boot[b] for t in range(n_t)]
        delta = [clipped_rho[t] * (r[t][b] + disc[t] * v_next[t] - v[t][b]) for t in range(n_t)]
        for s in range(n_t):
            total, trace = 0.0, 1.0
            for t in range(s, n_t):
                total += trace * delta[t]
                trace *= disc[t] * c[t]
            vs[s][b] = v[s][b] + total
        for s in range(n_t):
            vs_next = vs[s + 1][b] if s + 1 < n_t else boot[b]
            pg[s][b] = clipped_rho[s] * (r[s][b] + disc[s] * vs_next - v[s][b])
    return vs, pg


def _gae_reference(r, v, boot, d, gamma, lam):
    n_t, n_b = len(r), len(r[0])
    adv = [[0.0] * n_b for _ in range(n_t)]
    for b in range(n_b):
        last = 0.0
        for t in reversed(range(n_t)):
            nonterminal = 0.0 if d[t][b] else 1.0
            v_next = v[t + 1][b] if t + 1 < n_t else boot[b]
            delta = r[t][b] + gamma * v_next * nonterminal - v[t][b]
            last = delta + gamma * lam * nonterminal * last
            adv[t][b] = last
    return adv


def _discounted_returns(r, boot, d, gamma):
    n_t, n_b = len(r), len(r[0])
    out = [[0.0] * n_b for _ in range(n_t)]
    for b in range(n_b):
        g = boot[b]
        for t in reversed(range(n_t)):
            g = r[t][b] + gamma * (0.0 if d[t][b] else 1.0) * g
            out[t][b] = g
    return out


@pytest.mark.parametrize("rho_bar,c_bar", [(1.5, 0.9), (1.0, 1.0), (0.8, 0.5)])
def test_vtrace_matches_python_reference(rho_bar, c_bar):
    ro = _rollout()
    ratios = torch.exp(ro["target"] - ro["behaviour"])
    assert (ratios < 1.0).any() and (ratios > 1.0).any()
    assert (ratios > max(rho_bar, c_bar)).any()
    assert ((ratios > c_bar) & (ratios < rho_bar)).any() or rho_bar <= c_bar

    vs, pg = vtrace(*_vtrace_args(ro), gamma=0.97, rho_bar=rho_bar, c_bar=c_bar)
    ref_vs, ref_pg = _vtrace_reference(*(x.tolist() for x in _vtrace_args(ro)), 0.97, rho_bar, c_bar)
    assert vs.shape == pg.shape == (T, B)
    torch.testing.assert_close(vs, torch.tensor(ref_vs, dtype=torch.float64))
    torch.testing.assert_close(pg, torch.tensor(ref_pg, dtype=torch.float64))


def test_vtrace_dones_cut_the_trace():
    ro = _rollout()
    vs, _ = vtrace(*_vtrace_args(ro), gamma=0.97, rho_bar=1.5, c_bar=0.9)
    # Changing anything after the done at (3, 0) must not change v_s for s <= 3 in that column.
    changed = {k: v.clone() for k, v in ro.items()}
    changed["rewards"][4:, 0] += 100.0
    changed["values"][4:, 0] -= 50.0
    changed["bootstrap"][0] += 7.0
    vs2, _ = vtrace(*_vtrace_args(changed), gamma=0.97, rho_bar=1.5, c_bar=0.9)
    torch.testing.assert_close(vs2[:4, 0], vs[:4, 0])
    assert not torch.allclose(vs2[4:, 0], vs[4:, 0])


def test_vtrace_on_policy_equals_n_step_return():
    ro = _rollout()
    gamma = 0.95
    on_policy = dict(ro, target=ro["behaviour"].clone())
    vs, pg = vtrace(*_vtrace_args(on_policy), gamma=gamma)
    returns = torch.tensor(
        _discounted_returns(ro["rewards"].tolist(), ro["bootstrap"].tolist(), ro["dones"].tolist(), gamma),
        dtype=torch.float64,
    )
    torch.testing.assert_close(vs, returns)
    torch.testing.assert_close(pg, returns - ro["values"])
    # ...and equals GAE with lambda = 1.
    _, gae_returns = gae(ro["rewards"], ro["values"], ro["bootstrap"], ro["dones"], gamma, 1.0)
    torch.testing.assert_close(vs, gae_returns)


def test_vtrace_is_no_grad():
    ro = _rollout()
    target = ro["target"].clone().requires_grad_(True)
    values = ro["values"].clone().requires_grad_(True)
    vs, pg = vtrace(ro["behaviour"], target, ro["rewards"], values, ro["bootstrap"], ro["dones"], 0.99)
    assert not vs.requires_grad and not pg.requires_grad


@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (0.9, 0.0), (0.97, 1.0)])
def test_gae_matches_python_reference(gamma, lam):
    ro = _rollout(1)
    adv, ret = gae(ro["rewards"], ro["values"], ro["bootstrap"], ro["dones"], gamma, lam)
    ref = torch.tensor(
        _gae_reference(*(ro[k].tolist() for k in ("rewards", "values", "bootstrap", "dones")), gamma, lam),
        dtype=torch.float64,
    )
    torch.testing.assert_close(adv, ref)
    torch.testing.assert_close(ret, ref + ro["values"])


def test_gae_accepts_per_step_next_values():
    ro = _rollout(2)
    next_values = torch.cat([ro["values"][1:], ro["bootstrap"][None]])
    adv_a, _ = gae(ro["rewards"], ro["values"], ro["bootstrap"], ro["dones"], 0.99, 0.95)
    adv_b, _ = gae(ro["rewards"], ro["values"], next_values, ro["dones"], 0.99, 0.95)
    torch.testing.assert_close(adv_a, adv_b)
    # A different V(x_{t+1}) at the final step only changes that step's delta.
    next_values[-1] += 1.0
    adv_c, _ = gae(ro["rewards"], ro["values"], next_values, ro["dones"], 0.99, 0.95)
    torch.testing.assert_close(adv_c[-1], adv_a[-1] + 0.99 * (~ro["dones"][-1]).double())
    with pytest.raises(ValueError):
        gae(ro["rewards"], ro["values"], ro["bootstrap"][:2], ro["dones"], 0.99, 0.95)


def _tiny_batch() -> dict[str, torch.Tensor]:
    f64 = dict(dtype=torch.float64)
    old = torch.tensor([-1.0, -0.5, -2.0, -1.0, -0.3], **f64)
    ratios = torch.tensor([0.5, 1.0, 1.5, 0.5, 1.5], **f64)
    return {
        "new_log_probs": (old + torch.log(ratios)).requires_grad_(True),
        "old_log_probs": old,
        "advantages": torch.tensor([2.0, -1.0, 1.0, -2.0, -1.0], **f64),
        "values": torch.tensor([1.0, 0.0, 2.0, 0.5, -1.0], **f64).requires_grad_(True),
        "old_values": torch.tensor([0.0, 0.0, 1.0, 0.5, 0.0], **f64),
        "value_targets": torch.tensor([2.0, 1.0, 0.0, 0.5, -3.0], **f64),
        "entropy": torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0], **f64),
    }


def test_appo_loss_hand_computed():
    batch = _tiny_batch()
    hyper = dict(clip_ratio=0.1, value_clip=0.5, entropy_coef=0.01, value_coef=0.5)
    out = appo_loss(**batch, valid_mask=torch.ones(5, dtype=torch.bool), **hyper)
    assert isinstance(out, LossOutput)
    # Clip range [1/1.1, 1.1] = [0.90909, 1.1]. Per-sample min(r*A, clip(r)*A):
    #   r=0.5 A=+2: min(1.0, 1.81818) = 1.0        r=1.0 A=-1: -1.0
    #   r=1.5 A=+1: min(1.5, 1.1) = 1.1            r=0.5 A=-2: min(-1.0, -1.81818) = -1.81818
    #   r=1.5 A=-1: min(-1.5, -1.1) = -1.5
    policy_loss = -(1.0 - 1.0 + 1.1 - 2.0 / 1.1 - 1.5) / 5  # 0.4436364
    # Value (clip 0.5): max(unclipped, clipped) sq. errors = 2.25, 1, 4, 0, 6.25 -> 0.5 * 13.5 / 5
    value_loss = 1.35
    total = policy_loss + 0.5 * value_loss - 0.01 * 3.0
    assert out.policy_loss == pytest.approx(0.44363636, abs=1e-7)
    assert out.policy_loss == pytest.approx(policy_loss)
    assert out.value_loss == pytest.approx(value_loss)
    assert out.entropy == pytest.approx(3.0)
    assert out.total.item() == pytest.approx(total)
    assert out.total.item() == pytest.approx(1.08863636, abs=1e-7)
    assert out.clip_fraction == pytest.approx(0.8)
    assert out.ratio_mean == pytest.approx(1.0)
    kl = (2 * (0.5 - 1 - math.log(0.5)) + 2 * (1.5 - 1 - math.log(1.5))) / 5
    assert out.approx_kl == pytest.approx(kl)

    out.total.backward()
    # Gradient flows only through the chosen unclipped surrogate terms: d(-r*A/5)/dlogp = -r*A/5.
    torch.testing.assert_close(
        batch["new_log_probs"].grad, torch.tensor([-0.2, 0.2, 0.0, 0.0, 0.3], dtype=torch.float64)
    )
    # Samples 0 and 4 pick the saturated clipped value branch -> no gradient; sample 2: 0.5*0.5*2*(2-0)/5.
    torch.testing.assert_close(
        batch["values"].grad, torch.tensor([0.0, -0.1, 0.2, 0.0, 0.0], dtype=torch.float64)
    )


def test_appo_ratio_hard_clamp():
    batch = _tiny_batch()
    with torch.no_grad():
        batch["new_log_probs"][0] = batch["old_log_probs"][0] + 10.0  # ratio e^10 -> clamped to 20
    mask = torch.tensor([True, False, False, False, False])
    out = appo_loss(**batch, valid_mask=mask, clip_ratio=0.1, value_clip=1.0, entropy_coef=0.0, value_coef=0.5)
    assert out.ratio_mean == pytest.approx(20.0)
    # A = +2 > 0: min(20 * 2, 1.1 * 2) = 2.2
    assert out.policy_loss == pytest.approx(-2.2)


def test_appo_masked_samples_do_not_affect_loss_or_gradient():
    mask = torch.tensor([True, False, True, True, False])
    kwargs = dict(clip_ratio=0.2, value_clip=0.5, entropy_coef=0.01, value_coef=0.5)

    batch = _tiny_batch()
    out = appo_loss(**batch, valid_mask=mask, **kwargs)
    out.total.backward()

    perturbed = _tiny_batch()
    with torch.no_grad():
        for key in ("new_log_probs", "values"):
            perturbed[key][~mask] += 123.0
        for key in ("old_values", "value_targets", "entropy", "advantages"):
            perturbed[key][~mask] = -1e6
    out_p = appo_loss(**perturbed, valid_mask=mask, **kwargs)
    out_p.total.backward()

    subset = {k: v.detach()[mask].clone() for k, v in _tiny_batch().items()}
    subset["new_log_probs"].requires_grad_(True)
    subset["values"].requires_grad_(True)
    out_s = appo_loss(**subset, valid_mask=None, **kwargs)
    out_s.total.backward()

    for other in (out_p, out_s):
        assert other.total.item() == pytest.approx(out.total.item())
        for field in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "ratio_mean"):
            assert getattr(other, field) == pytest.approx(getattr(out, field))
    for key in ("new_log_probs", "values"):
        assert torch.all(batch[key].grad[~mask] == 0)
        assert torch.all(perturbed[key].grad[~mask] == 0)
        torch.testing.assert_close(batch[key].grad, perturbed[key].grad)
        torch.testing.assert_close(batch[key].grad[mask], subset[key].grad)


def test_appo_fully_masked_gives_zero_not_nan():
    batch = _tiny_batch()
    out = appo_loss(**batch, valid_mask=torch.zeros(5, dtype=torch.bool), clip_ratio=0.1, value_clip=1.0,
                    entropy_coef=0.01, value_coef=0.5)
    assert out.total.item() == 0.0
    for field in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "ratio_mean"):
        assert getattr(out, field) == 0.0
    out.total.backward()
    for key in ("new_log_probs", "values"):
        assert torch.isfinite(batch[key].grad).all()
        assert torch.all(batch[key].grad == 0)


def test_policy_lag_mask():
    versions = torch.tensor([10, 9, 8, 7, 3, 10])
    expected = torch.tensor([True, True, True, False, False, True])
    assert torch.equal(policy_lag_mask(versions, current_version=10, max_policy_lag=2), expected)
    mask_np = policy_lag_mask(np.array([5, 4, 0]), current_version=5, max_policy_lag=0)
    assert mask_np.dtype == torch.bool
    assert mask_np.tolist() == [True, False, False]


# ---- time limits: a truncated step bootstraps from its real final observation, and the trace stops there ----


def _truncated_rollout(seed: int = 3) -> dict[str, torch.Tensor]:
    ro = _rollout(seed)
    g = torch.Generator().manual_seed(seed + 100)
    truncated = torch.zeros(T, B, dtype=torch.bool)
    truncated[4, 1] = True  # a time limit: dones[4, 1] is set too
    truncated[7, 2] = True
    truncated[8, 1] = True  # at the rollout's last step (its final obs is not the next slot's first)
    ro["dones"] = ro["dones"] | truncated
    ro["truncated"] = truncated
    next_values = torch.cat([ro["values"][1:], ro["bootstrap"][None]])
    ro["final_values"] = torch.randn(T, B, generator=g, dtype=torch.float64)  # V(final obs) where truncated
    ro["next_values"] = torch.where(truncated, ro["final_values"], next_values)
    return ro


def _reference_with_truncation(mu, pi, r, v, v_next, dones, truncated, gamma, rho_bar, c_bar, lam):
    """Plain loops: V-trace (vs, pg) and GAE with a value discount kept at time limits and a trace cut at every end."""
    n_t, n_b = len(r), len(r[0])
    vs = [[0.0] * n_b for _ in range(n_t)]
    pg = [[0.0] * n_b for _ in range(n_t)]
    adv = [[0.0] * n_b for _ in range(n_t)]
    for b in range(n_b):
        rho = [math.exp(pi[t][b] - mu[t][b]) for t in range(n_t)]
        crho, c = [min(rho_bar, x) for x in rho], [min(c_bar, x) for x in rho]
        g = [gamma * (1.0 if (not dones[t][b] or truncated[t][b]) else 0.0) for t in range(n_t)]
        d = [gamma * (0.0 if dones[t][b] else 1.0) for t in range(n_t)]
        delta = [crho[t] * (r[t][b] + g[t] * v_next[t][b] - v[t][b]) for t in range(n_t)]
        for s in range(n_t):
            total, trace = 0.0, 1.0
            for t in range(s, n_t):
                total += trace * delta[t]
                trace *= d[t] * c[t]
            vs[s][b] = v[s][b] + total
        for s in range(n_t):
            goes_on = not dones[s][b] and s + 1 < n_t
            nxt = vs[s + 1][b] if goes_on else v_next[s][b]
            pg[s][b] = crho[s] * (r[s][b] + g[s] * nxt - v[s][b])
        last = 0.0
        for t in reversed(range(n_t)):
            td = r[t][b] + g[t] * v_next[t][b] - v[t][b]
            last = td + lam * d[t] * last
            adv[t][b] = last
    return vs, pg, adv


@pytest.mark.parametrize("rho_bar,c_bar", [(1.5, 0.9), (1.0, 1.0)])
def test_vtrace_and_gae_bootstrap_time_limits_from_the_final_value(rho_bar, c_bar):
    ro = _truncated_rollout()
    ratios = torch.exp(ro["target"] - ro["behaviour"])
    assert (ratios < 1.0).any() and (ratios > 1.0).any()
    vs, pg = vtrace(ro["behaviour"], ro["target"], ro["rewards"], ro["values"], ro["next_values"], ro["dones"], 0.97,
                    rho_bar, c_bar, truncated=ro["truncated"])
    adv, _ = gae(ro["rewards"], ro["values"], ro["next_values"], ro["dones"], 0.97, 0.9, truncated=ro["truncated"])
    ref_vs, ref_pg, ref_adv = _reference_with_truncation(
        *(ro[k].tolist() for k in ("behaviour", "target", "rewards", "values", "next_values", "dones", "truncated")),
        0.97, rho_bar, c_bar, 0.9)
    torch.testing.assert_close(vs, torch.tensor(ref_vs, dtype=torch.float64))
    torch.testing.assert_close(pg, torch.tensor(ref_pg, dtype=torch.float64))
    torch.testing.assert_close(adv, torch.tensor(ref_adv, dtype=torch.float64))


def test_a_time_limit_keeps_the_final_value_and_cuts_the_trace():
    ro = _truncated_rollout()
    args = lambda r: (r["behaviour"], r["target"], r["rewards"], r["values"], r["next_values"], r["dones"], 0.97)  # noqa: E731
    vs, _ = vtrace(*args(ro), truncated=ro["truncated"])
    # the value of the final observation at (4, 1) reaches the steps before it, with one discount
    bumped = {k: v.clone() for k, v in ro.items()}
    bumped["next_values"][4, 1] += 10.0
    vs_bumped, _ = vtrace(*args(bumped), truncated=bumped["truncated"])
    assert (vs_bumped[:5, 1] > vs[:5, 1]).all()
    # ...while the next episode (steps 5.. of column 1) does not
    later = {k: v.clone() for k, v in ro.items()}
    later["rewards"][5:, 1] += 100.0
    vs_later, _ = vtrace(*args(later), truncated=later["truncated"])
    torch.testing.assert_close(vs_later[:5, 1], vs[:5, 1])
    # treated as a termination instead, the final value is ignored
    vs_term, _ = vtrace(*args(bumped))
    vs_term_plain, _ = vtrace(*args(ro))
    torch.testing.assert_close(vs_term[:5, 1], vs_term_plain[:5, 1])
