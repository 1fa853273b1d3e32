"""Encoders, action distributions and ActorCritic paths (learner, inference, weights)."""

from __future__ import annotations

import math
import warnings

import gymnasium as gym
import msgpack
import numpy as np
import pytest
import torch
from torch import nn

from daskrl.config import ModelConfig
from daskrl.envs import EnvSpaces, probe_env
from daskrl.models import (
    ActorCritic,
    Categorical,
    CnnEncoder,
    DiagGaussian,
    MlpEncoder,
    MultiCategorical,
    make_encoder,
    register_encoder,
)

MULTI_DISCRETE = EnvSpaces.from_spaces(
    gym.spaces.Box(-1.0, 1.0, shape=(5,), dtype=np.float32), gym.spaces.MultiDiscrete([3, 4])
)


def _spaces(name: str) -> EnvSpaces:
    return MULTI_DISCRETE if name == "multi_discrete" else probe_env(name)


def _random_obs(spaces: EnvSpaces, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if spaces.obs_dtype == "uint8":
        return rng.integers(0, 256, size=(n, *spaces.obs_shape), dtype=np.uint8)
    return rng.standard_normal((n, *spaces.obs_shape)).astype(spaces.obs_dtype)


CASES = [
    # (spec, expected action shape per env, action dtype, encoder class)
    ("CartPole-v1", (), np.int64, MlpEncoder),
    ("Pendulum-v1", (1,), np.float32, MlpEncoder),
    ("daskrl/Catch-v0", (), np.int64, CnnEncoder),
    ("multi_discrete", (2,), np.int64, MlpEncoder),
]


@pytest.mark.parametrize(("spec", "action_shape", "action_dtype", "encoder_cls"), CASES)
def test_shapes_dtypes_and_finite_log_probs(spec, action_shape, action_dtype, encoder_cls):
    torch.manual_seed(0)
    spaces = _spaces(spec)
    model = ActorCritic(spaces)
    assert isinstance(model.encoder, encoder_cls)
    n = 6
    obs_np = _random_obs(spaces, n)

    actions, log_prob, value = model.act(obs_np)
    assert isinstance(actions, np.ndarray) and actions.shape == (n, *action_shape)
    assert actions.dtype == action_dtype
    assert log_prob.shape == (n,) and log_prob.dtype == np.float32 and np.isfinite(log_prob).all()
    assert value.shape == (n,) and value.dtype == np.float32

    obs = torch.from_numpy(obs_np)
    dist, v = model(obs)
    assert v.shape == (n,)
    lp, ent, v2 = model.evaluate(obs, torch.from_numpy(actions))
    assert lp.shape == ent.shape == v2.shape == (n,)
    np.testing.assert_allclose(lp.detach().numpy(), log_prob, rtol=1e-5, atol=1e-6)
    assert torch.isfinite(ent).all()
    assert lp.requires_grad  # learner path keeps autograd


def test_shared_encoder_defaults_and_no_duplicate_weights():
    cnn = ActorCritic(_spaces("daskrl/Catch-v0"))
    assert cnn.shared_encoder and cnn.value_encoder is None
    assert not any(k.startswith("value_encoder") for k in cnn.state_dict())
    mlp = ActorCritic(_spaces("CartPole-v1"))
    assert not mlp.shared_encoder and mlp.value_encoder is not None
    shared_mlp = ActorCritic(_spaces("CartPole-v1"), shared_encoder=True)
    n_params = lambda m: sum(p.numel() for p in m.parameters())
    assert n_params(shared_mlp) < n_params(mlp)


def test_the_value_encoder_option_shares_or_separates_the_trunk():
    """``--value-encoder`` overrides 'auto' both ways; a recurrent core cannot have a value encoder of its own."""
    shared_mlp = ActorCritic(_spaces("CartPole-v1"), ModelConfig(value_encoder="shared"))
    assert shared_mlp.shared_encoder and "value_encoder.net.0.weight" not in shared_mlp.state_dict()
    separate_cnn = ActorCritic(_spaces("daskrl/Catch-v0"), ModelConfig(value_encoder="separate"))
    assert not separate_cnn.shared_encoder and separate_cnn.value_encoder is not None
    with pytest.raises(ValueError, match="leave out --value-encoder separate"):
        ActorCritic(_spaces("CartPole-v1"), ModelConfig(rnn="gru", value_encoder="separate"))


def test_the_checkpoint_layout_and_the_paths_each_core_refuses():
    """The observation adapter and the core are objects chosen once, yet the state_dict keys stay those checkpoints
    hold: statistics buffers only when normalizing, no ``core.*`` keys without a recurrent core. A feed-forward
    model refuses the stateful paths and a recurrent one the stateless paths, each with a TypeError."""
    plain = ActorCritic(_spaces("CartPole-v1"), ModelConfig(normalize_obs=False))
    assert {k.split(".")[0] for k in plain.state_dict()} == {"return_stats", "encoder", "value_encoder", "actor",
                                                             "critic"}
    normalized = ActorCritic(_spaces("CartPole-v1"), ModelConfig(normalize_obs=True))
    assert list(normalized.state_dict())[:4] == ["obs_mean", "obs_var", "obs_count", "return_stats"]
    assert normalized.state_dict()["obs_mean"].shape == (4,) and normalized.obs_norm_shape == (4,)
    obs = torch.randn(3, 4)
    with pytest.raises(TypeError, match="feed-forward model has no state"):
        plain.step(obs, torch.zeros(3, 0))
    with pytest.raises(TypeError, match="feed-forward"):
        plain.evaluate_sequence(obs.reshape(1, 3, 4), torch.zeros(1, 3), torch.zeros(3, 0), None)
    recurrent = ActorCritic(_spaces("CartPole-v1"), ModelConfig(rnn="gru", rnn_size=8, normalize_obs=False))
    assert {k.split(".")[0] for k in recurrent.state_dict()} == {"return_stats", "encoder", "core", "actor",
                                                                 "critic"}
    assert recurrent.recurrent and recurrent.state_size == 8 and not plain.recurrent and plain.state_size == 0
    for stateless in (recurrent, recurrent.value):
        with pytest.raises(TypeError, match="needs its state"):
            stateless(obs)
    with pytest.raises(TypeError, match="pass state="):
        recurrent.act(obs.numpy())


def test_cleanrl_init_gives_near_uniform_policy():
    torch.manual_seed(1)
    model = ActorCritic(_spaces("CartPole-v1"))
    w = model.actor.logits.weight.detach()
    np.testing.assert_allclose((w @ w.T).numpy(), 1e-4 * np.eye(2), atol=1e-9)
    dist, _ = model(torch.randn(32, 4))
    assert torch.allclose(dist.logits.exp(), torch.full((32, 2), 0.5), atol=0.02)
    critic_w = model.critic.weight.detach()
    assert torch.isclose(critic_w.norm(), torch.tensor(1.0), atol=1e-5)


def test_categorical_matches_torch_and_samples_by_probability():
    torch.manual_seed(0)
    logits = torch.tensor([[2.0, 0.0, -1.0, float("-inf")]])
    dist = Categorical(logits)
    ref = torch.distributions.Categorical(logits=logits[:, :3], validate_args=False)
    actions = torch.tensor([0])
    assert torch.allclose(dist.log_prob(actions), ref.log_prob(actions))
    assert torch.allclose(dist.entropy(), ref.entropy())
    samples = Categorical(logits.expand(40_000, 4)).sample()
    freq = torch.bincount(samples, minlength=4).float() / samples.numel()
    assert freq[3] == 0
    assert torch.allclose(freq[:3], ref.probs[0], atol=0.015)


def test_multicategorical_is_sum_of_parts():
    logits = torch.randn(5, 7)
    dist = MultiCategorical(logits, [3, 4])
    actions = dist.sample()
    assert actions.shape == (5, 2)
    assert (actions[:, 0] < 3).all() and (actions[:, 1] < 4).all()
    a, b = Categorical(logits[:, :3]), Categorical(logits[:, 3:])
    expected = a.log_prob(actions[:, 0]) + b.log_prob(actions[:, 1])
    assert torch.allclose(dist.log_prob(actions), expected)
    assert torch.allclose(dist.entropy(), a.entropy() + b.entropy())


def test_gaussian_entropy_and_log_prob_closed_form():
    mean = torch.randn(4, 3)
    log_std = torch.tensor([-0.5, 0.0, 0.7])
    dist = DiagGaussian(mean, log_std)
    closed_form = sum(0.5 * math.log(2 * math.pi * math.e) + s for s in log_std.tolist())
    assert torch.allclose(dist.entropy(), torch.full((4,), closed_form))
    actions = dist.sample()
    ref = torch.distributions.Normal(mean, log_std.exp(), validate_args=False)
    assert torch.allclose(dist.log_prob(actions), ref.log_prob(actions).sum(-1), atol=1e-5)
    assert torch.equal(dist.mode(), mean)


def test_gaussian_log_std_gets_gradients():
    model = ActorCritic(_spaces("Pendulum-v1"), init_log_std=-0.5)
    assert torch.allclose(model.actor.log_std, torch.tensor([-0.5]))
    obs = torch.randn(8, 3)
    lp, ent, v = model.evaluate(obs, torch.randn(8, 1))
    (-(lp.mean() + ent.mean()) + v.square().mean()).backward()
    assert model.actor.log_std.grad is not None and model.actor.log_std.grad.abs().sum() > 0


@pytest.mark.parametrize("spec", ["CartPole-v1", "daskrl/Catch-v0", "Pendulum-v1"])
def test_state_dict_numpy_round_trip_gives_identical_outputs(spec):
    spaces = _spaces(spec)
    torch.manual_seed(0)
    src = ActorCritic(spaces)
    torch.manual_seed(1)
    dst = ActorCritic(spaces)
    obs = _random_obs(spaces, 5)
    assert not np.array_equal(src.act(obs, deterministic=True)[2], dst.act(obs, deterministic=True)[2])

    weights = src.state_dict_numpy()
    assert all(type(v) is np.ndarray for v in weights.values())
    # Ship through msgpack as raw bytes: decoded arrays are read-only views, like off the network.
    packed = msgpack.packb({k: (v.tobytes(), v.dtype.str, list(v.shape)) for k, v in weights.items()})
    decoded = {
        k: np.frombuffer(b, dtype=dt).reshape(shape) for k, (b, dt, shape) in msgpack.unpackb(packed).items()
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dst.load_state_dict_numpy(decoded)

    for a, b in zip(src.act(obs, deterministic=True), dst.act(obs, deterministic=True), strict=True):
        np.testing.assert_array_equal(a, b)
    t_obs = torch.from_numpy(obs)
    actions = torch.from_numpy(src.act(obs)[0])
    for a, b in zip(src.evaluate(t_obs, actions), dst.evaluate(t_obs, actions), strict=True):
        assert torch.equal(a, b)


def test_state_dict_numpy_is_a_snapshot():
    model = ActorCritic(_spaces("CartPole-v1"))
    weights = model.state_dict_numpy()
    before = {k: v.copy() for k, v in weights.items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    for k, v in weights.items():
        np.testing.assert_array_equal(v, before[k])


def test_load_state_dict_numpy_rejects_mismatch():
    model = ActorCritic(_spaces("CartPole-v1"))
    weights = model.state_dict_numpy()
    weights.pop(next(iter(weights)))
    with pytest.raises(RuntimeError, match="Missing key"):
        model.load_state_dict_numpy(weights)


def test_act_accepts_read_only_obs_without_warning():
    model = ActorCritic(_spaces("daskrl/Catch-v0"))
    obs = _random_obs(model.spaces, 2)
    obs.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        actions, _, _ = model.act(obs)
    assert actions.shape == (2,)


def test_make_encoder_auto_unknown_and_custom():
    assert isinstance(make_encoder("auto", _spaces("daskrl/Catch-v0")), CnnEncoder)
    assert isinstance(make_encoder("auto", _spaces("CartPole-v1"), hidden=(32,)), MlpEncoder)
    with pytest.raises(ValueError, match="did you mean 'cnn'"):
        make_encoder("cnnn", _spaces("CartPole-v1"))

    class Linear1(nn.Module):
        def __init__(self, spaces: EnvSpaces, width: int = 8) -> None:
            super().__init__()
            self.fc = nn.Linear(spaces.obs_dim, width)
            self.out_dim = width

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return self.fc(obs.reshape(obs.shape[0], -1).float())

    register_encoder("test_linear", Linear1)
    model = ActorCritic(_spaces("CartPole-v1"), ModelConfig(encoder="test_linear"), encoder_kwargs={"width": 5})
    assert model.encoder.out_dim == 5
    assert model.act(np.zeros((3, 4), dtype=np.float32))[0].shape == (3,)


def test_cnn_encoder_scales_uint8_frames():
    enc = CnnEncoder((84, 84, 1))
    assert enc.out_dim == 512
    frames = torch.full((2, 84, 84, 1), 255, dtype=torch.uint8)
    out = enc(frames)
    assert out.shape == (2, 512)
    # Scaling happens inside: a uint8 255 frame equals a float 1.0 frame fed through plain convolutions with the
    # same weights (the first one takes the frames themselves and folds the scale into its weights)
    first = torch.nn.Conv2d(1, 32, 8, stride=4)
    first.load_state_dict(enc.conv[0].state_dict())
    direct = enc.fc(enc.conv[1:](first(torch.ones(2, 1, 84, 84))))
    assert torch.allclose(out, direct, atol=1e-5)


# ---- continuous actions: the log-probability of the action actually sent ----


@pytest.mark.parametrize("bounds", ["clip", "squash"])
def test_bounded_gaussian_is_a_distribution_over_the_box(bounds):
    """exp(log_prob) over the Box (a density inside, plus the clipped tails' masses at the bounds) sums to 1."""
    from daskrl.models.heads import ACTION_BOUNDS

    low, high = torch.tensor([-2.0]), torch.tensor([1.0])
    dist = ACTION_BOUNDS[bounds](torch.tensor([[0.7]]), torch.tensor([0.3]), low, high)
    grid = torch.linspace(-2.0, 1.0, 200_001)[1:-1].reshape(-1, 1)  # the open interval
    density = torch.exp(dist.log_prob(grid.unsqueeze(1)).reshape(-1))
    total = torch.trapezoid(density, grid.reshape(-1))
    if bounds == "clip":
        masses = [torch.exp(dist.log_prob(bound.reshape(1, 1, 1))).squeeze() for bound in (low, high)]
        total += sum(masses)
    assert total.item() == pytest.approx(1.0, abs=2e-3)


@pytest.mark.parametrize("bounds", ["clip", "squash"])
def test_continuous_actions_are_sent_inside_the_box_with_their_own_log_prob(bounds):
    """What act() returns is what the env gets (inside the Box), and its log-prob is the learner's for it."""
    spaces = _spaces("Pendulum-v1")  # Box [-2, 2]
    torch.manual_seed(0)
    model = ActorCritic(spaces, ModelConfig(action_bounds=bounds, init_log_std=0.7))
    obs = np.random.default_rng(0).normal(size=(4096, *spaces.obs_shape)).astype(np.float32)
    actions, log_probs, _ = model.act(obs)
    assert np.all(actions >= -2.0) and np.all(actions <= 2.0)
    if bounds == "clip":
        at_bound = np.abs(actions) == 2.0
        assert at_bound.mean() > 0.05, "too few clipped samples to check the tails"
        # a clipped sample's probability is the whole tail beyond its bound: its empirical share matches
        mean = model.actor.mean(model.encoder(model.prepare(torch.from_numpy(obs))[0])).detach()
        std = float(model.actor.log_std.detach().exp())
        tail = torch.special.ndtr((mean - 2.0) / std).mean().item()
        assert (actions == 2.0).mean() == pytest.approx(tail, abs=0.02)
    with torch.no_grad():
        again, _, _ = model.evaluate(torch.from_numpy(obs), torch.from_numpy(actions))
    np.testing.assert_allclose(log_probs, again.numpy(), rtol=1e-5, atol=1e-5)
