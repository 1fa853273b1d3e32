"""The numpy fast path computes the same policy as the torch ActorCritic it was built from."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from daskrl.config import ModelConfig
from daskrl.envs import probe_env
from daskrl.models.actor_critic import ActorCritic
from daskrl.models.fast_path.numpy_plan import numpy_plan
from daskrl.models.fast_path.numpy_policy import NumpyPolicy


def model_for(env: str, normalize_obs: bool, shared_encoder: bool | None = None, stats_width: int | None = None,
              **model_options) -> ActorCritic:
    """A seeded model of ``env``, its parameters moved off their initial values; ``stats_width``: how many numbers the
    observation statistics hold (the observation's, unless its records pack more: a Dict's float keys)."""
    torch.manual_seed(0)
    spaces = probe_env(env)
    model = ActorCritic(spaces, ModelConfig(normalize_obs=normalize_obs, **model_options), shared_encoder=shared_encoder)
    if normalize_obs:
        width = stats_width or spaces.obs_dim
        model.set_obs_stats(np.linspace(-1, 1, width), np.linspace(0.5, 2.0, width))
    with torch.no_grad():  # move away from the near-uniform initial policy so differences would show
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return model.eval()


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1", "Acrobot-v1"])
@pytest.mark.parametrize("normalize_obs", [False, True])
@pytest.mark.parametrize("layout", [{}, {"shared_encoder": True}, {"hidden_sizes": [32], "activation": "relu"},
                                    {"hidden_sizes": []}], ids=["separate", "shared", "relu", "linear"])
def test_log_probs_and_values_match_torch(env, normalize_obs, layout):
    """The fused numpy network computes what the torch model does, whether the policy and value encoders are
    separate (fused side by side / block-diagonal), shared, or absent (the heads read the observation)."""
    model = model_for(env, normalize_obs, **layout)
    fast = NumpyPolicy.from_model(model, np.random.default_rng(0))
    obs = np.random.default_rng(1).normal(size=(300, *model.spaces.obs_shape)).astype(np.float32) * 3
    actions, log_probs, values = fast.act(obs)
    assert actions.dtype == (np.int64 if model.spaces.action_kind == "discrete" else np.float32)
    with torch.no_grad():
        t_lp, _, t_values = model.evaluate(torch.from_numpy(obs), torch.from_numpy(actions))
    np.testing.assert_allclose(log_probs, t_lp.numpy(), atol=2e-5)
    np.testing.assert_allclose(values, t_values.numpy(), atol=2e-5)
    det, _, _ = fast.act(obs, deterministic=True)
    t_det, _, _ = model.act(obs, deterministic=True)
    np.testing.assert_allclose(det, t_det, atol=1e-5)


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
@pytest.mark.parametrize("layout", [{}, {"shared_encoder": True}, {"hidden_sizes": []}, {"rnn": "gru", "rnn_size": 8}],
                         ids=["separate", "shared", "linear", "recurrent"])
def test_a_policy_without_the_critic_samples_the_same_actions_and_log_probs(env, layout):
    """Samplers build the policy without the critic (nothing reads their values): from the same random draws (and,
    recurrent, the same states) it samples what the whole network does, writes the same next states, and computes
    no value."""
    model = model_for(env, True, **layout)
    whole = NumpyPolicy.from_model(model, np.random.default_rng(3))
    actor = NumpyPolicy.from_model(model, np.random.default_rng(3), critic=False)
    obs = np.random.default_rng(4).normal(size=(64, *model.spaces.obs_shape)).astype(np.float32) * 3
    state = np.random.default_rng(5).normal(size=(64, model.state_size)).astype(np.float32) \
        if model.recurrent else None
    w_state = None if state is None else state.copy()
    for deterministic in (False, True):
        actions, log_probs, values = actor.act(obs, deterministic, state=state)
        w_actions, w_log_probs, _ = whole.act(obs, deterministic, state=w_state)
        assert values is None
        if state is not None:
            np.testing.assert_allclose(state, w_state, atol=1e-6)
        np.testing.assert_allclose(actions, w_actions, atol=1e-6)  # CartPole's: the same integers
        np.testing.assert_allclose(log_probs, w_log_probs, atol=1e-6)
    if not layout:  # separate encoders: the value encoder is not computed at all
        assert sum(layer.width for layer in actor.layers) * 2 == sum(layer.width for layer in whole.layers)


def test_sampled_actions_follow_the_policy_probabilities():
    model = model_for("CartPole-v1", True)
    fast = NumpyPolicy.from_model(model, np.random.default_rng(2))
    obs = np.repeat(np.array([[0.3, -0.5, 0.1, 0.8]], np.float32), 20000, axis=0)
    actions, log_probs, _ = fast.act(obs)
    p_one = float(np.exp(log_probs[actions == 1][0]))
    assert abs(actions.mean() - p_one) < 0.015, (actions.mean(), p_one)


def test_refresh_follows_new_weights_and_unsupported_models_keep_torch():
    model = model_for("CartPole-v1", False)
    fast = NumpyPolicy.from_model(model)
    obs = np.ones((4, 4), np.float32)
    before = fast.act(obs, deterministic=True)[2]
    with torch.no_grad():
        model.critic.bias.add_(1.0)
    fast.load(model.state_dict_numpy())
    np.testing.assert_allclose(fast.act(obs, deterministic=True)[2], before + 1.0, atol=1e-5)
    assert not NumpyPolicy.supports(ActorCritic(probe_env("daskrl/Catch-v0")))  # CNN encoder


@pytest.mark.parametrize("kind,layers", [("lstm", 1), ("gru", 1), ("lstm", 2), ("gru", 2)])
@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
def test_a_recurrent_cell_steps_as_torch_does_and_writes_the_next_state_in_place(env, kind, layers):
    """Three steps of the numpy cell from a random state: the same log-probs, values and next states as the torch
    model's step, the states written into the array passed in (as the samplers keep them in shared memory)."""
    model = model_for(env, True, rnn=kind, rnn_layers=layers, rnn_size=16)
    fast = NumpyPolicy.from_model(model, np.random.default_rng(0))
    rng = np.random.default_rng(1)
    state = rng.normal(size=(50, model.state_size)).astype(np.float32)
    t_state = torch.from_numpy(state.copy())
    for _ in range(3):
        obs = rng.normal(size=(50, *model.spaces.obs_shape)).astype(np.float32) * 3
        actions, log_probs, values = fast.act(obs, state=state)
        with torch.no_grad():
            dist, t_values, t_state = model.step(torch.from_numpy(obs), t_state)
            t_actions = torch.from_numpy(actions).reshape(50, -1) if env == "Pendulum-v1" \
                else torch.from_numpy(actions)
            np.testing.assert_allclose(log_probs, dist.log_prob(t_actions).numpy(), atol=3e-5)
        np.testing.assert_allclose(values, t_values.numpy(), atol=3e-5)
        np.testing.assert_allclose(state, t_state.numpy(), atol=3e-5)
    with pytest.raises(TypeError, match="state"):
        fast.act(obs)


def test_the_plan_is_plain_data_and_acting_from_it_needs_no_torch(tmp_path):
    """A sampler on the numpy path gets the plan in a parameter block's description and the weights from the
    block: in a fresh interpreter, NumpyPolicy acts from those two alone (torch never imported) as the torch model
    does."""
    model = model_for("Pendulum-v1", True, rnn="gru", rnn_size=8)
    plan = numpy_plan(model)
    assert json.loads(json.dumps(plan)) == plan, "the plan must travel as plain data"
    np.savez(tmp_path / "weights.npz", **model.state_dict_numpy())
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    obs = np.random.default_rng(4).normal(size=(6, 3)).astype(np.float32)
    np.save(tmp_path / "obs.npy", obs)
    code = ("import json, sys, numpy as np; from daskrl.models.fast_path.numpy_policy import NumpyPolicy; "
            f"d = {str(tmp_path)!r}; w = dict(np.load(d + '/weights.npz')); "
            "p = NumpyPolicy(json.load(open(d + '/plan.json')), w); state = np.zeros((6, 8), np.float32); "
            "a, lp, v = p.act(np.load(d + '/obs.npy'), deterministic=True, state=state); "
            "print(json.dumps(['torch' in sys.modules, a.tolist(), v.tolist()]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    torch_imported, actions, values = json.loads(out.stdout.strip().splitlines()[-1])
    assert not torch_imported
    with torch.no_grad():
        dist, t_values, _ = model.step(torch.from_numpy(obs), torch.zeros(6, 8))
    np.testing.assert_allclose(np.array(actions).reshape(6, -1), dist.mode().numpy().reshape(6, -1), atol=1e-5)
    np.testing.assert_allclose(values, t_values.numpy(), atol=1e-5)
    assert numpy_plan(ActorCritic(probe_env("daskrl/Catch-v0"))) is None  # a CNN: its samplers build the torch model


@pytest.mark.parametrize("normalize_obs", [False, True])
def test_dict_records_of_float_vectors_and_an_action_mask_act_as_torch_does(normalize_obs):
    """PettingZoo's tic-tac-toe (a board and an action mask, packed into records): the numpy path reads the board
    from the records, never draws a masked move, and computes the torch model's log-probabilities and choices."""
    pytest.importorskip("pettingzoo")
    from daskrl.envs.layouts.dict_obs import pack_into

    spaces = probe_env("pettingzoo.classic.tictactoe.tictactoe:env")
    model = model_for("pettingzoo.classic.tictactoe.tictactoe:env", normalize_obs, stats_width=18)  # 9 squares x 2
    assert NumpyPolicy.supports(model)
    rng = np.random.default_rng(0)
    masks = rng.random((300, 9)) < 0.5
    masks[np.arange(300), rng.integers(0, 9, 300)] = True  # at least one legal move
    records = np.stack([pack_into(np.zeros(spaces.obs_shape, np.uint8),
                                  {"observation": rng.integers(0, 2, (3, 3, 2)).astype(np.float32),
                                   "action_mask": mask.astype(np.float32)}, spaces.obs_keys) for mask in masks])
    fast = NumpyPolicy.from_model(model, np.random.default_rng(1))
    for _ in range(5):
        actions, log_probs, values = fast.act(records)
        assert masks[np.arange(300), actions].all(), "a masked move was drawn"
        with torch.no_grad():
            t_lp, _, t_values = model.evaluate(torch.from_numpy(records), torch.from_numpy(actions))
        np.testing.assert_allclose(log_probs, t_lp.numpy(), atol=2e-5)
        np.testing.assert_allclose(values, t_values.numpy(), atol=2e-5)
    det, _, _ = fast.act(records, deterministic=True)
    t_det, _, _ = model.act(records, deterministic=True)
    np.testing.assert_array_equal(det, t_det)


def test_an_exponential_draw_of_zero_never_picks_a_masked_action():
    """Gumbel-max through log(exponential draws): a draw of exactly 0 on a masked action gave -inf + inf, a NaN that
    argmax takes (met in a 15-minute tic-tac-toe league: PettingZoo ended the game on the illegal move)."""
    pytest.importorskip("pettingzoo")
    from daskrl.envs.layouts.dict_obs import pack_into

    spaces = probe_env("pettingzoo.classic.tictactoe.tictactoe:env")
    model = ActorCritic(spaces, ModelConfig()).eval()
    mask = np.array([1, 0, 0, 0, 0, 0, 0, 0, 1], np.float32)
    record = pack_into(np.zeros(spaces.obs_shape, np.uint8), {"observation": np.zeros((3, 3, 2), np.float32),
                                                              "action_mask": mask}, spaces.obs_keys)

    class ZeroDraws:  # every draw 0 where the mask forbids, 1 elsewhere
        def standard_exponential(self, shape, dtype):
            return np.broadcast_to(mask, shape).astype(dtype)

    fast = NumpyPolicy.from_model(model, ZeroDraws())
    actions, log_probs, _ = fast.act(np.stack([record] * 4))
    assert set(actions.tolist()) <= {0, 8} and np.isfinite(log_probs).all(), actions
