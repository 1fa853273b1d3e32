"""An MLP actor-critic's gradients written out (daskrl/algo/kernels/mlp_gradients.py, appo_loss_gradients.py) are autograd's,
the flat parameter buffer (daskrl/algo/kernels/flat_parameters.py) changes nothing a model or a checkpoint sees, and Adam
stepping it flat is torch's fused Adam (to float rounding)."""

from __future__ import annotations

import copy
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from daskrl.algo.appo.loss import appo_loss
from daskrl.algo.appo.trainer import APPOTrainer, TrajectoryBatch
from daskrl.algo.kernels.appo_loss_gradients import appo_loss_gradients
from daskrl.algo.kernels.eager_optim import EagerAdam
from daskrl.algo.kernels.flat_parameters import FlatParameters
from daskrl.algo.kernels.mlp_gradients import MlpGradients
from daskrl.config import Config, ModelConfig
from daskrl.envs import EnvSpaces
from daskrl.models.actor_critic import ActorCritic, build_model
from daskrl.models.inputs import activations

LOSS_INPUTS = ("new_log_probs", "advantages", "values", "old_values", "value_targets", "entropy")


def _loss_inputs(n: int, seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    inputs = {k: torch.randn(n) for k in LOSS_INPUTS}
    inputs["old_log_probs"] = inputs["new_log_probs"] + 0.3 * torch.randn(n)  # ratios on both sides of the clip
    inputs["old_values"] = inputs["values"] + 0.5 * torch.randn(n)
    inputs["advantages"][:8] = 0.0  # ties of the surrogate's two branches
    inputs["new_log_probs"][8:12] = inputs["old_log_probs"][8:12] + 5.0  # beyond the hard ratio clamp
    return inputs


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("value_clip", [0.2, math.inf])
def test_the_written_out_loss_gradients_are_autograds(masked, value_clip):
    inputs = _loss_inputs(512, seed=1)
    mask = torch.rand(512, generator=torch.Generator().manual_seed(2)) > 0.3 if masked else None
    options = {"clip_ratio": 0.1, "value_clip": value_clip, "entropy_coef": 0.01, "value_coef": 0.5}
    leaves = {k: v.clone().requires_grad_(k in ("new_log_probs", "values", "entropy")) for k, v in inputs.items()}
    expected = appo_loss(**leaves, valid_mask=mask, **options)
    (expected.total * 0.75).backward()
    out, grads = appo_loss_gradients(**inputs, valid_mask=mask, scale=0.75, **options)
    for name, leaf in (("log_probs", "new_log_probs"), ("entropy", "entropy"), ("values", "values")):
        ours = getattr(grads, name)
        assert ours.dtype == torch.float32
        torch.testing.assert_close(ours, leaves[leaf].grad, rtol=1e-5, atol=1e-9, msg=name)
    for key in ("total_value", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "ratio_mean"):
        assert getattr(out, key) == pytest.approx(getattr(expected, key), rel=1e-5, abs=1e-7), key


def test_the_in_place_sigmoid_tanh_is_the_sigmoid_tanh_to_the_bit():
    x = torch.randn(512, 64)
    assert torch.equal(activations.sigmoid_tanh_(x.clone()), activations.sigmoid_tanh(x))


def _spaces(obs_dim: int = 4, actions: int = 2) -> EnvSpaces:
    return EnvSpaces.from_spaces(gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32), gym.spaces.Discrete(actions))


def _autograd_gradients(model: ActorCritic, obs, actions, loss_inputs, options) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    lp, entropy, values = model.evaluate(obs, actions)
    out = appo_loss(lp, loss_inputs["old_log_probs"], loss_inputs["advantages"], values, loss_inputs["old_values"],
                    loss_inputs["value_targets"], entropy, None, **options)
    out.total.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("model_cfg, actions, shared, through_sigmoid", [
    (ModelConfig(), 2, None, False),  # CartPole's: two tanh towers, observations normalized
    (ModelConfig(), 2, None, True),  # the same with tanh through sigmoid (the kernel some CPUs run faster)
    (ModelConfig(activation="relu", hidden_sizes=[32, 48, 16], normalize_obs=False), 5, None, False),
    (ModelConfig(), 3, True, False),  # one tower read by both heads
])
def test_the_written_out_network_gradients_are_autograds(model_cfg, actions, shared, through_sigmoid, monkeypatch):
    monkeypatch.setattr(activations, "sigmoid_is_faster", lambda: through_sigmoid)
    torch.manual_seed(0)
    model = ActorCritic(_spaces(6, actions), model_cfg, shared_encoder=shared)
    if not model_cfg.normalize_obs:
        model.set_obs_stats = lambda *args: None
    model.set_obs_stats(np.full(6, 0.5), np.full(6, 2.0), 10.0)
    flat = FlatParameters(model.parameters())
    by_hand = MlpGradients(model, flat)
    rng = np.random.default_rng(0)
    obs = torch.from_numpy(rng.normal(size=(256, 6)).astype(np.float32))
    acts = torch.from_numpy(rng.integers(0, actions, 256))
    inputs = _loss_inputs(256, seed=3)
    options = {"clip_ratio": 0.2, "value_clip": 0.5, "entropy_coef": 0.01, "value_coef": 0.5}
    expected = _autograd_gradients(model, obs, acts, inputs, options)
    model.zero_grad(set_to_none=True)
    forward = by_hand.forward(by_hand.prepare(obs))
    lp, entropy, values = model.evaluate(obs, acts)
    torch.testing.assert_close(by_hand.log_probs(forward, acts), lp.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(by_hand.entropy(forward), entropy.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(forward.values, values.detach(), rtol=1e-5, atol=1e-6)
    _, grads = appo_loss_gradients(by_hand.log_probs(forward, acts), inputs["old_log_probs"], inputs["advantages"],
                                   forward.values, inputs["old_values"], inputs["value_targets"],
                                   by_hand.entropy(forward), None, **options)
    by_hand.backward(forward, acts, grads)
    assert flat.holds_gradients()
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, expected[name], rtol=1e-4, atol=1e-8, msg=name)


def test_models_the_written_out_gradients_do_not_cover_train_through_autograd():
    pendulum = EnvSpaces.from_spaces(gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-2, 2, (1,), np.float32))
    frames = EnvSpaces.from_spaces(gym.spaces.Box(0, 255, (84, 84, 4), np.uint8), gym.spaces.Discrete(4))
    assert MlpGradients.supports(build_model(_spaces(), ModelConfig(), 0))
    assert not MlpGradients.supports(build_model(pendulum, ModelConfig(), 0))  # a Gaussian head
    assert not MlpGradients.supports(build_model(frames, ModelConfig(), 0))  # a CNN
    assert not MlpGradients.supports(build_model(_spaces(), ModelConfig(rnn="gru"), 0))
    assert not MlpGradients.supports(build_model(_spaces(), ModelConfig(activation="elu"), 0))
    with_kl = Config().replace(kl_coef=0.1)
    assert APPOTrainer(build_model(_spaces(), with_kl.model, 0), with_kl.learner, 0).by_hand is None


def _batch(seed: int, T: int = 16, N: int = 64) -> TrajectoryBatch:
    rng = np.random.default_rng(seed)
    return TrajectoryBatch(obs=rng.normal(size=(T + 1, N, 4)).astype(np.float32),
                           actions=rng.integers(0, 2, (T, N)), rewards=rng.normal(size=(T, N)).astype(np.float32),
                           dones=rng.random((T, N)) < 0.05, log_probs=np.full((T, N), math.log(0.5), np.float32),
                           policy_version=np.zeros((T, N), np.int64))


def test_a_training_step_by_hand_moves_the_weights_as_plain_torchs_step_does():
    """--learner-kernels auto (written-out gradients, flat buffer, fused Adam) against off (autograd, torch.optim's
    Adam): the same losses and weights, step after step, to float rounding."""
    cfg = Config().replace(batch_size=256, num_epochs=2)
    by_hand, through_autograd = (APPOTrainer(build_model(_spaces(), cfg.model, seed=0),
                                             cfg.replace(learner_kernels=kernels).learner, 0)
                                 for kernels in ("auto", "off"))
    assert by_hand.by_hand is not None and through_autograd.by_hand is None
    for step in range(3):
        torch.manual_seed(step)
        ours = by_hand.train(_batch(step), 0)
        torch.manual_seed(step)
        theirs = through_autograd.train(_batch(step), 0)
        assert ours["updates"] == theirs["updates"] == 8
        for key in ("loss", "policy_loss", "value_loss", "entropy", "grad_norm"):
            assert ours[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-6), key
    for (name, a), b in zip(by_hand.model.named_parameters(), through_autograd.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=name)


def test_parameters_given_new_memory_are_flattened_again_before_the_next_step():
    cfg = Config().replace(batch_size=256)
    trainer = APPOTrainer(build_model(_spaces(), cfg.model, seed=0), cfg.learner, 0)
    trainer.train(_batch(0), 0)
    old_flat = trainer.flat
    for p in trainer.model.parameters():
        p.data = p.data.clone()  # as model.to() on another device, or a copy, would
    assert not old_flat.intact()
    trainer.train(_batch(1), 0)
    assert trainer.flat is not old_flat and trainer.flat.intact() and trainer.flat.holds_gradients()
    reference = APPOTrainer(build_model(_spaces(), cfg.model, seed=0), cfg.replace(learner_kernels="off").learner, 0)
    for seed in (0, 1):
        reference.train(_batch(seed), 0)
    for a, b in zip(trainer.model.parameters(), reference.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_a_minibatch_whose_loss_is_not_finite_is_skipped_and_the_next_writes_its_gradients_again(monkeypatch):
    import dataclasses

    from daskrl.algo.kernels import mlp_gradients

    cfg = Config().replace(batch_size=256)
    trainer = APPOTrainer(build_model(_spaces(), cfg.model, seed=0), cfg.learner, 0)
    trainer.train(_batch(0), 0)  # the gradients of its last minibatch stay in the buffer
    real = mlp_gradients.appo_loss_gradients
    calls = []

    def first_not_finite(*args, **kwargs):
        out, grads = real(*args, **kwargs)
        calls.append(out)
        return (dataclasses.replace(out, total_value=math.nan) if len(calls) == 1 else out), grads

    monkeypatch.setattr(mlp_gradients, "appo_loss_gradients", first_not_finite)
    before = trainer.flat.values.clone()
    moments = trainer.optimizer._flat_moments[0].clone()
    metrics = trainer.train(_batch(1), 0)
    assert metrics["skipped_updates"] == 1 and metrics["updates"] == 3
    assert trainer.flat.holds_gradients()  # dropped after the skip, the views again from the next minibatch on
    assert not torch.equal(before, trainer.flat.values) and torch.isfinite(trainer.flat.values).all()
    # three Adam steps, not four: the skipped minibatch's stale gradients were not applied
    assert float(trainer.optimizer.state_dict()["state"][0]["step"]) == 4 + 3
    assert not torch.equal(moments, trainer.optimizer._flat_moments[0])


def test_flat_parameters_are_views_the_model_and_its_checkpoints_do_not_tell_apart():
    model = build_model(_spaces(), ModelConfig(), seed=0)
    state = copy.deepcopy(model.state_dict())
    flat = FlatParameters(model.parameters())
    for name, p in model.named_parameters():
        assert p.data_ptr() >= flat.values.data_ptr() and torch.equal(p, state[name])
    other = build_model(_spaces(), ModelConfig(), seed=1)
    model.load_state_dict(other.state_dict())  # copied into the views
    assert flat.holds_gradients() is False  # no gradients yet
    assert torch.equal(flat.values, torch.cat([p.detach().reshape(-1) for p in other.parameters()]))
    for p in model.parameters():
        p.grad = flat.grad_of(p)
    flat.grads.normal_()
    reference = [torch.nn.Parameter(torch.zeros_like(p)) for p in model.parameters()]
    for r, p in zip(reference, model.parameters(), strict=True):
        r.grad = p.grad.clone()
    expected = torch.nn.utils.clip_grad_norm_(reference, 0.5)
    assert flat.holds_gradients()
    norm = flat.clip_(0.5)
    assert expected > 1.0  # the clip scales
    assert norm == pytest.approx(expected.item(), rel=1e-6)
    for p, r in zip(model.parameters(), reference, strict=True):
        torch.testing.assert_close(p.grad, r.grad, rtol=1e-6, atol=1e-9)
    next(model.parameters()).grad = torch.zeros_like(next(model.parameters()))  # a learner group's summed copy
    assert not flat.holds_gradients()


def test_adam_stepping_the_flat_buffer_is_torchs_fused_adam_and_checkpoints_alike():
    """The same kernel on one buffer: equal to float rounding (its vector lanes fall at other elements, and the fused
    multiply-adds with them)."""
    flat_model, plain_model = (build_model(_spaces(), ModelConfig(), seed=0) for _ in range(2))
    flat = FlatParameters(flat_model.parameters())
    flat_opt = EagerAdam(flat_model.parameters(), lr=1e-3, eps=1e-5, fused=True)
    flat_opt.step_flat(flat)
    plain_opt = torch.optim.Adam(plain_model.parameters(), lr=1e-3, eps=1e-5, fused=True)
    for step in range(5):
        flat.grads.copy_(torch.randn(flat.grads.shape, generator=torch.Generator().manual_seed(step)))
        for p_flat, p_plain in zip(flat_model.parameters(), plain_model.parameters(), strict=True):
            p_flat.grad = flat.grad_of(p_flat)
            p_plain.grad = flat.grad_of(p_flat).clone()
        flat_opt.step()
        plain_opt.step()
        assert (flat_opt._flat_moments is not None) == (step > 0)  # the first step makes the moments
    for a, b in zip(flat_model.parameters(), plain_model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=0)
    saved, expected = flat_opt.state_dict(), plain_opt.state_dict()
    for key, state in expected["state"].items():
        for name, value in state.items():
            torch.testing.assert_close(saved["state"][key][name], value, rtol=1e-6, atol=0, msg=f"{key} {name}")
    # a checkpoint loads into a new flat optimizer, which goes on equal to torch's
    resumed = EagerAdam(flat_model.parameters(), lr=1e-3, eps=1e-5, fused=True)
    resumed.step_flat(flat)
    resumed.load_state_dict(copy.deepcopy(saved))
    flat.grads.fill_(1.0)
    for p_flat, p_plain in zip(flat_model.parameters(), plain_model.parameters(), strict=True):
        p_flat.grad, p_plain.grad = flat.grad_of(p_flat), torch.ones_like(p_plain)
    resumed.step()
    plain_opt.step()
    assert resumed._flat_moments is not None
    for a, b in zip(flat_model.parameters(), plain_model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=0)
    # a parameter without a gradient: torch's own step, which counts a step for the others only, once each
    next(flat_model.parameters()).grad = None
    resumed.step()
    steps = [float(state["step"]) for state in resumed.state_dict()["state"].values()]
    assert steps[0] == 6.0 and set(steps[1:]) == {7.0}
    # the states share one step count while flat; another parameter group gives each its own first
    fresh = EagerAdam(flat_model.parameters(), lr=1e-3, eps=1e-5, fused=True)
    fresh.step_flat(flat)
    for p in flat_model.parameters():
        p.grad = flat.grad_of(p)
    fresh.step()
    fresh.step()
    counts = [fresh.state[p]["step"] for p in flat_model.parameters()]
    assert fresh._flat_moments is not None and len({id(c) for c in counts}) == 1
    fresh.add_param_group({"params": [torch.nn.Parameter(torch.zeros(3))]})
    counts = [fresh.state[p]["step"] for p in flat_model.parameters()]
    assert len({id(c) for c in counts}) == len(counts) and {float(c) for c in counts} == {2.0}
