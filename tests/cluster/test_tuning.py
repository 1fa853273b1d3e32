"""The knobs Sample Factory users tune: the IMPALA encoder (``--encoder impala``), the KL penalty (``--kl-coef``), the
KL-adaptive learning rate (``--lr-schedule kl_adaptive``) and the optimizer (``--optimizer adam|adamw|lamb``,
``--weight-decay``): each checked against an independent computation, the options' bad values, and real training
runs (IMPALA on an image task, LAMB on CartPole) on one cluster for the module."""

from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from daskrl import train
from daskrl.algo.appo.loss import appo_loss
from daskrl.algo.appo.trainer import APPOTrainer, TrajectoryBatch
from daskrl.algo.common.lamb import Lamb
from daskrl.algo.common.lr_schedule import kl_adapted_lr
from daskrl.algo.kernels.eager_optim import EagerAdam, EagerAdamW
from daskrl.cli import build_parser
from daskrl.config import Config, LearnerConfig, ModelConfig
from daskrl.envs import EnvSpaces, probe_env
from daskrl.errors import ConfigError
from daskrl.learning.checkpoints import CheckpointStore
from daskrl.models import ActorCritic, make_encoder
from daskrl.models.actor_critic import build_model, check_model
from daskrl.models.inputs.impala import ImpalaEncoder

from ..helpers import run_config, slow

T, N = 8, 8

# ---- the IMPALA encoder ----


def _image_spaces(shape: tuple[int, int, int]) -> EnvSpaces:
    return EnvSpaces.from_spaces(gym.spaces.Box(0, 255, shape, np.uint8), gym.spaces.Discrete(6))


@pytest.mark.parametrize(("shape", "after_stages"), [((84, 84, 4), (32, 11, 11)), ((64, 64, 3), (32, 8, 8))])
def test_impala_encoder_shapes(shape, after_stages):
    """Atari's 84x84x4 and Procgen's 64x64x3: three stages each halve the image (rounding up) and end in 32
    channels, then one 256-unit layer; as the policy's one shared trunk."""
    encoder = make_encoder("impala", _image_spaces(shape))
    assert isinstance(encoder, ImpalaEncoder) and encoder.out_dim == 256
    obs = torch.randint(0, 256, (5, *shape), dtype=torch.uint8)
    trunk = encoder.stages(obs)  # the first stage's convolution takes the frames themselves
    assert tuple(trunk.shape) == (5, *after_stages)
    features = encoder(obs)
    assert features.shape == (5, 256) and bool((features >= 0).all())  # the last relu
    assert encoder.fc.in_features == math.prod(after_stages)
    convs = [m for m in encoder.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 15 and [c.out_channels for c in convs[::5]] == [16, 32, 32]  # conv + 2 blocks x 2 convs
    model = ActorCritic(_image_spaces(shape), ModelConfig(encoder="impala"))
    assert model.shared_encoder and model.value_encoder is None
    actions, log_probs, values = model.act(obs.numpy())
    assert actions.shape == (5,) and np.isfinite(log_probs).all() and np.isfinite(values).all()


def test_impala_encoder_on_vector_observations_is_one_readable_line():
    config = Config.from_flat({"env": "CartPole-v1", "encoder": "impala"})
    with pytest.raises(ConfigError, match="--encoder 'impala' cannot be built") as err:
        check_model(config, probe_env("CartPole-v1"))
    assert "\n" not in str(err.value) and "HWC image" in str(err.value)


# ---- the KL penalty ----


def _loss_inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    n = 64
    old = -torch.rand(n, generator=g) * 2
    new = old + torch.randn(n, generator=g) * 0.5
    new[3], new[4] = old[3] + 5.0, old[4] - 5.0  # ratios beyond the hard clamp [0.05, 20]
    valid = torch.rand(n, generator=g) > 0.2
    return {"new_log_probs": new.requires_grad_(), "old_log_probs": old, "advantages": torch.randn(n, generator=g),
            "values": torch.randn(n, generator=g), "old_values": torch.randn(n, generator=g),
            "value_targets": torch.randn(n, generator=g), "entropy": torch.rand(n, generator=g), "valid_mask": valid}


def test_kl_penalty_adds_coef_times_the_k3_estimate_of_valid_samples():
    inputs = _loss_inputs()
    options = {"clip_ratio": 0.2, "value_clip": 1.0, "entropy_coef": 0.01, "value_coef": 0.5}
    plain = appo_loss(**inputs, **options)
    penalized = appo_loss(**inputs, **options, kl_coef=0.3)

    # k3 = (r - 1) - log r over the valid samples, with r = pi / mu clamped as the surrogate's ratio is
    valid = inputs["valid_mask"]
    r = [min(max(math.exp(n - o), 0.05), 20.0)
         for n, o, v in zip(inputs["new_log_probs"].tolist(), inputs["old_log_probs"].tolist(), valid.tolist(),
                            strict=True) if v]
    k3 = sum((x - 1.0) - math.log(x) for x in r) / len(r)
    assert k3 > 0.1  # far enough from 0 that a missing term shows
    assert penalized.total.item() == pytest.approx(plain.total.item() + 0.3 * k3, rel=1e-5)
    assert penalized.approx_kl == pytest.approx(k3, rel=1e-5) == plain.approx_kl
    assert (penalized.policy_loss, penalized.value_loss) == (plain.policy_loss, plain.value_loss)

    # its gradient: d/d log pi of coef * mean k3 is coef * (r - 1) / count inside the clamp, 0 outside or masked
    (grad_plain,) = torch.autograd.grad(plain.total, inputs["new_log_probs"])
    (grad_penalized,) = torch.autograd.grad(penalized.total, inputs["new_log_probs"])
    ratio = torch.exp(inputs["new_log_probs"] - inputs["old_log_probs"]).detach()
    inside = valid & (ratio > 0.05) & (ratio < 20.0)
    expected = torch.where(inside, 0.3 * (ratio - 1.0) / int(valid.sum()), torch.zeros_like(ratio))
    assert torch.allclose(grad_penalized - grad_plain, expected, atol=1e-6)


# ---- the KL-adaptive learning rate ----


def test_kl_adapted_lr_follows_the_kl_within_bounds():
    cfg = LearnerConfig(lr_schedule="kl_adaptive", lr_schedule_kl_threshold=0.01, lr_adaptive_min=1e-4,
                        lr_adaptive_max=1e-2)
    assert kl_adapted_lr(1e-3, 0.03, cfg) == pytest.approx(1e-3 / 1.5)  # above twice the target: down
    assert kl_adapted_lr(1e-3, 0.004, cfg) == pytest.approx(1e-3 * 1.5)  # below half of it: up
    assert kl_adapted_lr(1e-3, 0.02, cfg) == 1e-3 == kl_adapted_lr(1e-3, 0.005, cfg)  # the band's edges: kept
    assert kl_adapted_lr(1.2e-4, 1.0, cfg) == 1e-4  # never below the floor
    assert kl_adapted_lr(9e-3, 0.0, cfg) == 1e-2  # nor above the ceiling
    assert kl_adapted_lr(1e-3, math.nan, cfg) == 1e-3  # no estimate: no move


def _cartpole_batch(spaces: EnvSpaces, behaviour: np.ndarray | float, seed: int = 0) -> TrajectoryBatch:
    rng = np.random.default_rng(seed)
    return TrajectoryBatch(obs=rng.normal(size=(T + 1, N, *spaces.obs_shape)).astype(np.float32),
                           actions=rng.integers(0, 2, (T, N)).astype(spaces.action_dtype),
                           rewards=np.ones((T, N), np.float32), dones=rng.random((T, N)) < 0.05,
                           log_probs=np.broadcast_to(np.asarray(behaviour, np.float32), (T, N)).copy(),
                           policy_version=np.zeros((T, N), np.int32))


def _trainer(spaces: EnvSpaces, **learner) -> APPOTrainer:
    cfg = dataclasses.replace(LearnerConfig(), batch_size=32, num_epochs=2, **learner)
    return APPOTrainer(build_model(spaces, ModelConfig(normalize_obs=False), seed=0), cfg, 0)


def test_kl_adaptive_schedule_moves_the_policys_learning_rate_after_each_epoch():
    spaces = probe_env("CartPole-v1")
    options = {"lr_schedule": "kl_adaptive", "learning_rate": 1e-5, "lr_schedule_kl_threshold": 0.01}
    # behaviour = the current policy's own log-probs: a tiny step leaves KL near 0, so each of 2 epochs raises it
    near = _trainer(spaces, **options)
    probe = _cartpole_batch(spaces, 0.0)
    with torch.no_grad():
        own, _, _ = near.model.evaluate(torch.from_numpy(probe.obs[:-1].reshape(T * N, -1)),
                                        torch.from_numpy(probe.actions.reshape(-1)))
    metrics = near.train(_cartpole_batch(spaces, own.numpy().reshape(T, N)), 0)
    assert metrics["approx_kl"] < 0.005 and metrics["lr"] == 1e-5  # the step started at the policy's rate
    assert near.hyperparams()["learning_rate"] == pytest.approx(1e-5 * 1.5 ** 2)

    # behaviour far from the current policy (mu = e^-3 where pi is about 1/2): KL above twice the target, twice down
    far = _trainer(spaces, **options)
    assert far.train(_cartpole_batch(spaces, -3.0), 0)["approx_kl"] > 0.02
    assert far.hyperparams()["learning_rate"] == pytest.approx(1e-5 / 1.5 ** 2)
    assert far.optimizer.param_groups[0]["lr"] == far.hyperparams()["learning_rate"]

    # a rate set from outside (PBT, steering) is where it goes on from; the bounds hold
    far.set_hyperparams({"learning_rate": 1e-6 * 1.2})
    far.train(_cartpole_batch(spaces, -3.0, seed=1), 1)
    assert far.hyperparams()["learning_rate"] == 1e-6  # --lr-adaptive-min

    # the adapted rate is the policy's own: a checkpoint keeps it
    resumed = _trainer(spaces, **options)
    resumed.load_state_dict(far.state_dict())
    assert resumed.hyperparams()["learning_rate"] == 1e-6

    # the constant schedule never moves it, whatever the KL
    constant = _trainer(spaces, learning_rate=1e-5)
    constant.train(_cartpole_batch(spaces, -3.0), 0)
    assert constant.hyperparams()["learning_rate"] == 1e-5


# ---- LAMB and the optimizer choice ----


def _lamb_by_hand(w: list[float], grads: list[list[float]], lr: float, wd: float, b1: float = 0.9,
                  b2: float = 0.999, eps: float = 1e-6, cap: float = 10.0) -> list[float]:
    """LAMB written out in plain floats, one tensor: Adam's bias-corrected direction plus decay, scaled by
    min(|w|, cap) / |u| (1 when a norm is 0)."""
    m, v = [0.0] * len(w), [0.0] * len(w)
    for t, g in enumerate(grads, start=1):
        m = [b1 * mi + (1 - b1) * gi for mi, gi in zip(m, g, strict=True)]
        v = [b2 * vi + (1 - b2) * gi * gi for vi, gi in zip(v, g, strict=True)]
        u = [(mi / (1 - b1 ** t)) / (math.sqrt(vi / (1 - b2 ** t)) + eps) + wd * wi
             for mi, vi, wi in zip(m, v, w, strict=True)]
        w_norm, u_norm = min(math.hypot(*w), cap), math.hypot(*u)
        trust = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
        w = [wi - lr * trust * ui for wi, ui in zip(w, u, strict=True)]
    return w


def test_lamb_matches_a_hand_computation():
    # step 1 written out for w = (3, 4), g = (0.1, -0.2), lr 0.1, decay 0.01: m-hat = g, sqrt(v-hat) = |g|, so
    # u = (0.1 / 0.100001, -0.2 / 0.200001) + 0.01 * (3, 4) and the step is 0.1 * (|w| = 5) / |u| * u
    u = (0.1 / 0.100001 + 0.03, -0.2 / 0.200001 + 0.04)
    scale = 0.1 * 5.0 / math.hypot(*u)
    step_one = [3.0 - scale * u[0], 4.0 - scale * u[1]]
    assert _lamb_by_hand([3.0, 4.0], [[0.1, -0.2]], lr=0.1, wd=0.01) == pytest.approx(step_one, rel=1e-12)

    grads = {"w": [[0.1, -0.2], [0.3, 0.05], [-0.2, 0.1]], "big": [[1.0, 2.0], [0.5, -1.0], [2.0, 2.0]],
             "zero": [[0.5, -0.5], [0.1, 0.2], [0.3, 0.3]]}
    start = {"w": [3.0, 4.0], "big": [12.0, 16.0], "zero": [0.0, 0.0]}  # |big| = 20 > the cap of 10; zero: ratio 1
    params = {k: torch.nn.Parameter(torch.tensor(v, dtype=torch.float64)) for k, v in start.items()}
    optimizer = Lamb(params.values(), lr=0.1, weight_decay=0.01)
    for t in range(3):
        for k, p in params.items():
            p.grad = torch.tensor(grads[k][t], dtype=torch.float64)
        optimizer.step()
    for k, p in params.items():
        assert p.tolist() == pytest.approx(_lamb_by_hand(start[k], grads[k], lr=0.1, wd=0.01), rel=1e-9), k
    assert float(optimizer.state[params["w"]]["step"]) == 3.0


def test_lamb_state_round_trip_continues_exactly():
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    twin = torch.nn.Linear(3, 2)
    twin.load_state_dict(net.state_dict())
    x = torch.randn(16, 3)
    first, second = Lamb(net.parameters(), lr=0.05, weight_decay=0.1), Lamb(twin.parameters(), lr=0.05)
    for step in range(4):
        if step == 2:  # the second one resumes from the first's state (as a checkpoint would carry it)
            twin.load_state_dict(net.state_dict())
            second.load_state_dict(copy.deepcopy(first.state_dict()))
        for model, opt in ((net, first), (twin, second)):
            opt.zero_grad()
            (model(x) ** 2).mean().backward()
            opt.step()
    assert second.param_groups[0]["weight_decay"] == 0.1
    assert all(torch.equal(a, b) for a, b in zip(net.parameters(), twin.parameters(), strict=True))


@pytest.mark.parametrize(("name", "cls"), [("adam", EagerAdam), ("adamw", EagerAdamW), ("lamb", Lamb)])
def test_optimizer_choice_trains_and_its_state_resumes(name, cls):
    """Each --optimizer steps the weights and checkpoints its moments; a resume keeps them (--weight-decay from the
    resuming run's options), and a resume with another --optimizer starts that one's moments afresh."""
    spaces = probe_env("CartPole-v1")
    decay = {} if name == "adam" else {"weight_decay": 0.05}
    trainer = _trainer(spaces, optimizer=name, **decay)
    assert type(trainer.optimizer) is cls
    before = [p.detach().clone() for p in trainer.model.parameters()]
    metrics = trainer.train(_cartpole_batch(spaces, math.log(0.5)), 0)
    assert metrics["updates"] == 4 and all(math.isfinite(v) for v in metrics.values())
    assert all(not torch.equal(a, p) for a, p in zip(before, trainer.model.parameters(), strict=True))
    state = trainer.state_dict()
    assert state["optimizer_name"] == name and state["optimizer"]["state"]

    again = _trainer(spaces, optimizer=name, **({} if name == "adam" else {"weight_decay": 0.01}))
    again.load_state_dict(state)
    steps = [float(s["step"]) for s in again.optimizer.state_dict()["state"].values()]
    assert steps and all(s == 4.0 for s in steps)
    assert again.optimizer.param_groups[0]["weight_decay"] == (0.0 if name == "adam" else 0.01)

    other = _trainer(spaces, optimizer="lamb" if name != "lamb" else "adam")
    other.load_state_dict(state)
    assert not other.optimizer.state_dict()["state"], "another optimizer's moments were loaded"
    assert all(torch.equal(a, b) for a, b in zip(other.model.parameters(), trainer.model.parameters(), strict=True))


# ---- options ----


@pytest.mark.parametrize(("options", "names"), [
    ({"optimizer": "sgd"}, ["--optimizer", "adam, adamw, lamb", "'sgd'"]),
    ({"lr_schedule": "cosine"}, ["--lr-schedule", "constant, linear, kl_adaptive"]),
    ({"kl_coef": -0.1}, ["--kl-coef", ">= 0"]),
    ({"weight_decay": -1.0}, ["--weight-decay", ">= 0"]),
    ({"lr_schedule_kl_threshold": 0.0}, ["--lr-schedule-kl-threshold", "> 0"]),
    ({"weight_decay": 0.01}, ["--weight-decay 0.01", "--optimizer adam", "adamw"]),
    ({"lr_schedule": "kl_adaptive", "lr_adaptive_min": 0.1, "lr_adaptive_max": 0.01},
     ["--lr-adaptive-min 0.1", "--lr-adaptive-max 0.01"]),
    ({"lr_schedule": "kl_adaptive", "learning_rate": 0.05}, ["--learning-rate 0.05", "[1e-06, 0.01]"]),
])
def test_bad_tuning_options_are_one_line_naming_the_option(options, names):
    with pytest.raises(ConfigError) as err:
        Config.from_flat(options).validate()
    message = str(err.value)
    assert "\n" not in message and all(name in message for name in names), message


def test_every_commands_help_renders_with_the_tuning_options():
    """argparse formats help text with %: a stray one in an option's help breaks --help for every option."""
    parser = build_parser()
    for name, command in parser.commands.items():
        assert command.format_help(), name
    train_help = " ".join(parser.commands["train"].format_help().split())
    for flag in ("--optimizer {adam,adamw,lamb}", "--weight-decay", "--kl-coef", "--lr-schedule-kl-threshold",
                 "--lr-adaptive-min", "--lr-adaptive-max", "kl_adaptive", "'impala'"):
        assert flag in train_help, flag


def test_good_tuning_options_validate():
    Config.from_flat({"optimizer": "lamb", "weight_decay": 0.01, "kl_coef": 0.2, "lr_schedule": "kl_adaptive",
                      "encoder": "impala"}).validate()


# ---- real runs ----


@slow("trains IMPALA on an image task until it is solved (about 5 s of training)")
def test_impala_learns_an_image_task(tmp_path, session):
    """Which quadrant of an 8x8 frame is lit: a policy blind to the pixels averages 2 of 8, IMPALA's must reach 6."""
    config = run_config(tmp_path, "impala", env="daskrl.testing.environments.envs:bright_quadrant", env_kwargs={"size": 8},
                        encoder="impala", num_workers=1, num_envs_per_worker=8, rollout=16, batch_size=128,
                        num_batches_per_epoch=2, learning_rate=2e-3, stop_at_return=6.0, stop_window=50,
                        train_for_seconds=90)
    summary = train(config, client=session.client)
    assert "stop-at-return" in summary["stop_reason"], summary["stop_reason"]
    assert summary["reached_return_at_s"] is not None  # the mean of 50 episodes was 6.0 or more
    # the summary's mean also counts the episodes that ended while the run stopped: it was 5.92 in one run
    assert summary["episode_return_mean"] >= 5.5, summary["episode_return_mean"]
    state = CheckpointStore(Path(summary["experiment_dir"]) / "checkpoints").load("latest")
    assert any(k.startswith("encoder.stages.2.res1.conv1") for k in state["model"]), sorted(state["model"])[:5]
    assert all(torch.isfinite(v).all() for v in state["model"].values() if v.is_floating_point())


@slow("trains CartPole with LAMB to a return of 150 (about 10 s of training)")
def test_lamb_trains_cartpole(tmp_path, session):
    config = run_config(tmp_path, "lamb", env="CartPole-v1", num_workers=1, optimizer="lamb", learning_rate=1e-2,
                        weight_decay=1e-4, stop_at_return=150, train_for_seconds=90)
    summary = train(config, client=session.client)
    assert "stop-at-return" in summary["stop_reason"], summary["stop_reason"]
    state = CheckpointStore(Path(summary["experiment_dir"]) / "checkpoints").load("latest")
    assert state["optimizer_name"] == "lamb" and state["optimizer"]["param_groups"][0]["weight_decay"] == 1e-4
