"""Recurrent policies (``--rnn lstm|gru``): the core's sequence pass against a step-by-step loop, truncated BPTT's
chunks and gradients, the training loss against an independent reference, the samplers' states in real trajectory
slots (inline and remote), evaluation carrying the state, and a checkpoint/resume keeping the core's weights."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from daskrl import train
from daskrl.algo.appo.recurrent import SequenceBatch
from daskrl.algo.appo.trainer import APPOTrainer, TrajectoryBatch
from daskrl.config import Config, ConfigError, LearnerConfig, ModelConfig
from daskrl.envs import probe_env
from daskrl.evaluation import run_episodes
from daskrl.learning.checkpoints import CheckpointStore
from daskrl.models.actor_critic import build_model
from daskrl.models.core_state import rnn_state_size
from daskrl.models.fast_path.numpy_policy import NumpyPolicy
from daskrl.runtime import connect_cluster, spawn
from daskrl.runtime.memory.shm import list_segments
from daskrl.sampling.policies.policy import SamplingPolicy
from daskrl.setups import PolicySetup
from daskrl.testing.sampling import (
    PolicySource,
    PolicySourceSetup,
    sample_slots,
    source_weights,
)

from ..helpers import SMALL_CARTPOLE, run_config, slow, split_chains

CARTPOLE = probe_env("CartPole-v1")
COUNTING = "daskrl/Counting-v0"
EPISODE = 5  # Counting's episode length: not a multiple of the slot length, so episodes straddle slots
ACTOR_SCALE = 4.0  # a sharper policy, so the state's effect shows in the log-probs

_ids = itertools.count()


def reference_steps(model, obs, starts, state):
    """The plain loop a sequence pass must equal: step by step, zeroing an env's state where its episode starts.
    Returns (log-prob, entropy, value) callables' inputs: a list of (dist, value) per step and the states entering
    each step (after the reset) and after the last step."""
    outs, entering = [], []
    for t in range(obs.shape[0]):
        state = state * (1.0 - starts[t].float()).unsqueeze(-1)
        entering.append(state)
        dist, value, state = model.step(obs[t], state)
        outs.append((dist, value))
    return outs, entering, state


@pytest.mark.parametrize("kind,layers", [("lstm", 1), ("gru", 1), ("lstm", 2)])
def test_sequence_pass_matches_a_step_by_step_loop(kind, layers):
    model = build_model(CARTPOLE, ModelConfig(rnn=kind, rnn_layers=layers, rnn_size=16), 0)
    assert model.state_size == rnn_state_size(ModelConfig(rnn=kind, rnn_layers=layers, rnn_size=16), CARTPOLE)
    g = torch.Generator().manual_seed(1)
    T, B = 12, 5
    obs = torch.randn(T, B, 4, generator=g)
    actions = torch.randint(0, 2, (T, B), generator=g)
    starts = torch.rand(T, B, generator=g) < 0.2
    starts[0, 0] = starts[6, 1] = True
    state = torch.randn(B, model.state_size, generator=g)
    lp, entropy, value, before = model.evaluate_sequence(obs, actions, state, starts, keep=[4, 8])
    outs, entering, final = reference_steps(model, obs, starts, state)
    expected_lp = torch.stack([d.log_prob(a) for (d, _), a in zip(outs, actions, strict=True)])
    torch.testing.assert_close(lp.reshape(T, B), expected_lp)
    torch.testing.assert_close(entropy.reshape(T, B), torch.stack([d.entropy() for d, _ in outs]))
    torch.testing.assert_close(value.reshape(T, B), torch.stack([v for _, v in outs]))
    torch.testing.assert_close(before[T], final)
    for t in (4, 8):  # kept states enter their step before its reset: the reset applied gives the loop's state
        torch.testing.assert_close(before[t] * (1.0 - starts[t].float()).unsqueeze(-1), entering[t])
    # the resets matter: the same pass without them differs
    assert not torch.allclose(model.evaluate_sequence(obs, actions, state, None)[0], lp)


def sequence_data(model, T, N, seed=0, done_p=0.15):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(T + 1, N, 4, generator=g)
    actions = torch.randint(0, 2, (T * N,), generator=g)
    dones = (torch.rand(T, N, generator=g) < done_p).float()
    states = torch.randn(N, model.state_size, generator=g) * 0.5
    return obs, actions, dones, states


def test_bptt_chunks_start_from_the_full_pass_and_cut_gradients_at_their_starts():
    """Each minibatch sequence (a chunk of one column) gives the log-probs of a plain loop over the whole column
    from the slot's stored state, and its gradients are those of a loop whose state is detached at the chunk's
    start (truncated BPTT), not of one through the whole slot."""
    model = build_model(CARTPOLE, ModelConfig(rnn="lstm", rnn_size=16), 0)
    T, N, R = 12, 4, 4
    obs, actions, dones, states = sequence_data(model, T, N)
    seq = SequenceBatch(model, obs, actions, dones, states, R)
    samples = seq.minibatch_samples(2 * R)
    assert samples == 2 * R
    order = seq.order(samples)
    assert order.numel() == T * N and sorted(order.tolist()) == list(range(T * N))  # every step once per epoch
    flat = {"obs": obs[:-1].reshape(T * N, 4), "actions": actions, "index": torch.arange(T * N)}
    starts = torch.cat([torch.zeros(1, N), dones[:-1]])
    for k in range(0, order.numel(), samples):
        idx = order[k:k + samples]
        grid = idx.reshape(R, -1)  # time-major [R, sequences]: each column one chunk of one env column
        t0, cols = grid[0] // N, grid[0] % N
        assert torch.all(t0 % R == 0) and torch.equal(grid, (t0 + torch.arange(R)[:, None]) * N + cols)
        model.zero_grad()
        lp, _, _ = seq.evaluate({key: v[idx] for key, v in flat.items()})
        lp.sum().backward()
        grads = [p.grad.clone() for p in model.core.parameters()]
        model.zero_grad()
        reference = []
        for t_start, col in zip(t0.tolist(), cols.tolist(), strict=True):
            with torch.no_grad():  # the state entering the chunk: the whole column's loop from the stored state
                _, entering, _ = reference_steps(model, obs[:T, col:col + 1], starts[:, col:col + 1],
                                                 states[col:col + 1])
            state = entering[t_start]
            outs, _, _ = reference_steps(model, obs[t_start:t_start + R, col:col + 1],
                                         starts[t_start:t_start + R, col:col + 1], state)
            acts = actions.reshape(T, N)[t_start:t_start + R, col:col + 1]
            reference.append(torch.cat([d.log_prob(a) for (d, _), a in zip(outs, acts, strict=True)]))
        expected = torch.stack(reference, 1)  # [R, sequences]
        torch.testing.assert_close(lp.reshape(R, -1), expected, rtol=1e-5, atol=1e-5)
        expected.sum().backward()
        for got, want in zip(grads, [p.grad for p in model.core.parameters()], strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    assert not seq.chunk_states.requires_grad


def vtrace_reference(behaviour, target, rewards, values, next_values, dones, truncated, gamma):
    """V-trace (rho-bar = c-bar = 1) written from the IMPALA paper's sums, one column and one step at a time:
    v_s = V(x_s) + sum_{t >= s} gamma^(t - s) (prod_{s <= i < t} c_i) delta_t over the steps of s's episode."""
    T, N = rewards.shape
    rho = np.minimum(np.exp(target - behaviour), 1.0)
    vs, adv = np.zeros((T, N)), np.zeros((T, N))
    for n in range(N):
        delta = [rho[t, n] * (rewards[t, n] + (0.0 if dones[t, n] and not truncated[t, n] else gamma)
                              * next_values[t, n] - values[t, n]) for t in range(T)]
        for s in range(T):
            total, weight = 0.0, 1.0
            for t in range(s, T):
                total += weight * delta[t]
                if dones[t, n]:
                    break
                weight *= gamma * rho[t, n]
            vs[s, n] = values[s, n] + total
        for s in range(T):
            ended = dones[s, n]
            v_next = next_values[s, n] if ended or s == T - 1 else vs[s + 1, n]
            discount = 0.0 if ended and not truncated[s, n] else gamma
            adv[s, n] = rho[s, n] * (rewards[s, n] + discount * v_next - values[s, n])
    return vs, adv


def test_lstm_training_loss_matches_an_independent_reference():
    """One minibatch of whole sequences (two chunks per column), a termination and a time-limit end with its real
    final observation: the loss the trainer reports is the one computed here by a step-by-step forward pass,
    V-trace from its sums and the clipped surrogate written out."""
    T, N, R, gamma, clip, entropy_coef = 6, 3, 3, 0.9, 0.2, 0.01
    model = build_model(CARTPOLE, ModelConfig(rnn="lstm", rnn_size=8, normalize_obs=False), 0)
    reference = copy.deepcopy(model)
    rng = np.random.default_rng(3)
    dones = np.zeros((T, N), bool)
    dones[1, 0] = True  # terminated inside the first chunk
    dones[4, 2] = True  # cut by a time limit inside the second chunk
    truncated = np.zeros((T, N), bool)
    truncated[4, 2] = True
    batch = TrajectoryBatch(
        obs=rng.normal(size=(T + 1, N, 4)).astype(np.float32), actions=rng.integers(0, 2, (T, N)),
        rewards=rng.normal(size=(T, N)).astype(np.float32), dones=dones,
        log_probs=np.log(rng.uniform(0.3, 0.7, (T, N))).astype(np.float32),
        policy_version=np.zeros((T, N), np.int32), final_obs=rng.normal(size=(1, 4)).astype(np.float32),
        final_index=np.array([4 * N + 2]), rnn_states=(rng.normal(size=(N, model.state_size)) * 0.5).astype(np.float32))
    cfg = dataclasses.replace(LearnerConfig(), batch_size=T * N, num_epochs=1, recurrence=R, gamma=gamma,
                              clip_ratio=clip, entropy_coef=entropy_coef, normalize_advantages=False,
                              normalize_returns=False, value_clip=0.0)
    metrics = APPOTrainer(model, cfg, 0).train(batch, current_version=0)
    assert metrics["updates"] == 1

    with torch.no_grad():
        obs = torch.from_numpy(batch.obs)
        lp, ent, val = np.zeros((T, N)), np.zeros((T, N)), np.zeros((T, N))
        next_values = np.zeros((T, N))
        for n in range(N):
            state = torch.from_numpy(batch.rnn_states[n:n + 1])
            for t in range(T):
                if t and dones[t - 1, n]:
                    state = torch.zeros_like(state)
                dist, value, state = reference.step(obs[t, n:n + 1], state)
                lp[t, n] = float(dist.log_prob(torch.tensor([batch.actions[t, n]])))
                ent[t, n], val[t, n] = float(dist.entropy()), float(value)
                if truncated[t, n]:  # the real final observation, seen from the state after its step
                    next_values[t, n] = float(reference.value_step(torch.from_numpy(batch.final_obs), state))
                elif t == T - 1:  # the bootstrap, from the state after the last step (reset if it ended)
                    last_state = torch.zeros_like(state) if dones[t, n] else state
                    next_values[t, n] = float(reference.value_step(obs[T, n:n + 1], last_state))
            for t in range(T - 1):
                if not truncated[t, n]:
                    next_values[t, n] = val[t + 1, n]
    targets, advantages = vtrace_reference(batch.log_probs.astype(np.float64), lp, batch.rewards, val, next_values,
                                           dones, truncated, gamma)
    ratio = np.clip(np.exp(lp - batch.log_probs), 0.05, 20.0)  # the learner's weights are those that made lp
    surrogate = np.minimum(ratio * advantages, np.clip(ratio, 1 / (1 + clip), 1 + clip) * advantages)
    policy_loss = -surrogate.mean()
    value_loss = 0.5 * ((val - targets) ** 2).mean()
    expected = policy_loss + cfg.value_coef * value_loss - entropy_coef * ent.mean()
    assert metrics["policy_loss"] == pytest.approx(policy_loss, abs=1e-5)
    assert metrics["value_loss"] == pytest.approx(value_loss, abs=1e-5)
    assert metrics["entropy"] == pytest.approx(ent.mean(), abs=1e-6)
    assert metrics["loss"] == pytest.approx(expected, abs=1e-5)


def test_recurrent_options_are_checked_and_the_numpy_fast_path_takes_the_core():
    with pytest.raises(ConfigError, match="--recurrence 5 does not divide --rollout 32"):
        Config.from_flat({"rnn": "lstm", "recurrence": 5}).validate()
    with pytest.raises(ConfigError, match="--batch-size 500 does not hold whole sequences"):
        Config.from_flat({"rnn": "gru", "batch_size": 500}).validate()
    with pytest.raises(ConfigError, match="--targets-from minibatch needs a feed-forward policy"):
        Config.from_flat({"rnn": "gru", "targets_from": "minibatch"}).validate()
    Config.from_flat({"rnn": "lstm", "recurrence": 8}).validate()
    Config.from_flat({"recurrence": 5}).validate()  # without a core the option is not used
    Config.from_flat({"targets_from": "minibatch"}).validate()
    setup = PolicySetup(CARTPOLE, ModelConfig(rnn="lstm"), None, 0, True, "float32", "cpu", {}, None, None, False, None)
    policy = SamplingPolicy(None, setup)
    assert policy.fast is not None and NumpyPolicy.supports(policy.model)  # the LSTM cell runs in numpy too
    # bfloat16 sampling: the encoder runs in bfloat16, the core and heads in float32, and the state goes on
    state = np.zeros((3, policy.model.state_size), np.float32)
    bf16 = SamplingPolicy(None, dataclasses.replace(setup, inference_precision="bfloat16"))
    actions, log_probs, _ = bf16.act(np.ones((3, 4), np.float32), state)
    assert bf16.precision == "bfloat16" and next(bf16.model.core.parameters()).dtype == torch.float32
    assert actions.shape == (3,) and np.all(log_probs < 0) and np.abs(state).sum() > 0


class ActionLog(gym.Wrapper):
    """Records the actions an env is stepped with."""

    def __init__(self, env):
        super().__init__(env)
        self.actions = []

    def step(self, action):
        self.actions.append(int(action))
        return super().step(action)


def test_evaluation_carries_the_state_across_steps_and_resets_it_per_episode():
    model = build_model(CARTPOLE, ModelConfig(rnn="gru", rnn_size=16), 0)
    model.load_state_dict_numpy({k: v * 4.0 if k.startswith(("actor.", "core.")) and "weight" in k else v
                                 for k, v in model.state_dict_numpy().items()})
    env = ActionLog(gym.make("CartPole-v1"))
    env.reset(seed=5)
    returns, lengths = run_episodes(env, model, 2, deterministic=True)
    replay = gym.make("CartPole-v1")
    replay.reset(seed=5)
    expected = []
    for _ in range(2):  # the same policy by hand: state from zeros each episode, carried step to step
        obs, _ = replay.reset()
        state, done = np.zeros((1, model.state_size), np.float32), False
        while not done:
            action = int(model.act(np.asarray(obs, np.float32)[None], True, state=state)[0][0])
            expected.append(action)
            obs, _, terminated, truncated, _ = replay.step(action)
            done = terminated or truncated
    assert env.actions == expected and sum(lengths) == len(expected)


# ---- on a real cluster ----


def replay_slot(model, s, state):
    """Log-probs [T, B] of a slot's actions from ``state`` (its stored start), step by step with resets after each
    ended episode, and the state the slot leaves for the next one (reset where the last step ended an episode)."""
    obs, actions = torch.from_numpy(s["obs"]), torch.from_numpy(s["actions"])
    ended = torch.from_numpy((s["terminated"] | s["truncated"]).astype(bool))
    state, out = torch.from_numpy(state), []
    with torch.no_grad():
        for t in range(actions.shape[0]):
            dist, _, state = model.step(obs[t], state)
            out.append(dist.log_prob(actions[t]))
            state = state * (~ended[t]).float().unsqueeze(-1)
    return torch.stack(out).numpy(), state.numpy()


@pytest.mark.parametrize("inference", ["inline", "remote"])
def test_samplers_store_each_slots_starting_state_and_reset_it_at_episode_starts(cluster, hosts, inference):
    """A real rollout worker (acting inline, or through two inference workers that any request may go to) on the
    deterministic Counting env: each slot's stored state is zeros exactly for envs whose episode begins at its
    first step, replaying the policy from it (resetting after each episode's end) gives the log-probs the sampler
    wrote at every step, and it is the state the previous slot of its split left."""
    rollout = 4
    config = Config.from_flat({
        "env": COUNTING, "env_kwargs": {"episode_length": EPISODE}, "num_workers": 1, "num_envs_per_worker": 4,
        "worker_num_splits": 2 if inference == "remote" else 1, "rollout": rollout, "slots_per_split": 2,
        "inference": inference, "num_inference_workers": 2, "rnn": "lstm", "rnn_size": 16}).validate()
    spaces = probe_env(COUNTING, config.env.env_kwargs)
    source = spawn(cluster.client, PolicySource, f"rnnsource{next(_ids)}", run_id=cluster.run_id, worker=hosts[0],
                   setup=PolicySourceSetup(spaces, config.model, actor_scale=ACTOR_SCALE))
    source.call("publish")  # every step acts with version >= 1: the source's weights, known here
    sampled = sample_slots(cluster, config, spaces, [source.call("desc")], 16, f"rnn{next(_ids)}")
    source.call("stop", timeout=30)
    kept, served = sampled.kept, sampled.served
    assert {"rnn_states", "rnn_live"} <= set(kept[0])
    if inference == "remote":
        assert all(n > 0 for n in served), f"both inference workers must act: {served}"
    model = build_model(spaces, config.model, 0)
    model.load_state_dict_numpy(source_weights(spaces, config.model, 0, ACTOR_SCALE, version=1))  # the one published
    model.eval()
    splits = config.sampler.num_splits()

    def carries(last: dict, s: dict) -> bool:  # two splits may end in one observation with other states
        return np.allclose(replay_slot(model, last, last["rnn_states"])[1], s["rnn_states"], rtol=1e-5, atol=1e-5)

    chains = split_chains(kept, splits, continues=carries)
    checked_zero = checked_carried = 0
    for chain in chains:
        left = None
        for s in chain:
            state = s["rnn_states"]
            begins = s["obs"][0][:, 0] == 0  # Counting's step-in-episode: 0 where an episode begins
            assert np.all(state[begins] == 0), "a state not reset where an episode begins at the slot's start"
            assert np.all(np.abs(state[~begins]).sum(1) > 0), "a state lost in the middle of an episode"
            checked_zero += int(begins.sum())
            assert np.all(s["policy_version"] == 1)
            log_probs, after = replay_slot(model, s, state)
            np.testing.assert_allclose(s["log_probs"], log_probs, rtol=1e-5, atol=1e-5,
                                       err_msg="the sampler did not act from the stored state, carried step by step")
            if left is not None:
                np.testing.assert_allclose(state, left, rtol=1e-5, atol=1e-5,
                                           err_msg="a slot does not start from the state its split's last slot left")
                checked_carried += 1
            left = after
    assert checked_zero and checked_carried >= 4
    # the test can fail: without the resets inside a slot the log-probs differ
    s = next(s for s in kept if s["terminated"][:-1].any())
    no_reset = dict(s, terminated=np.zeros_like(s["terminated"]), truncated=np.zeros_like(s["truncated"]))
    assert not np.allclose(replay_slot(model, no_reset, s["rnn_states"])[0], s["log_probs"], atol=1e-4)


#: a small CartPole run with an LSTM core
LSTM_CARTPOLE = {**SMALL_CARTPOLE, "rnn": "lstm", "rnn_size": 16, "recurrence": 8}


def core_weights(state: dict) -> dict[str, torch.Tensor]:
    return {k: v for k, v in state["model"].items() if k.startswith("core.")}


def test_a_recurrent_run_trains_checkpoints_and_resumes_with_its_core(tmp_path):
    first = train(run_config(tmp_path, "rnn", base=LSTM_CARTPOLE, train_for_env_steps=15_000))
    store = CheckpointStore(f"{first['experiment_dir']}/checkpoints")
    saved = store.load("latest")
    cores = core_weights(saved)
    assert set(cores) >= {"core.rnn.weight_ih_l0", "core.rnn.weight_hh_l0"}
    initial = core_weights({"model": build_model(CARTPOLE, run_config(tmp_path, base=LSTM_CARTPOLE).model, 0).state_dict()})
    moved = max(float((cores[k] - initial[k]).abs().max()) for k in cores)
    assert moved > 1e-3, "the core did not train"
    assert all(not math.isnan(float(v.sum())) for v in cores.values())
    # resumed with a learning rate too small to move anything visibly: the core goes on from the checkpoint's
    second = train(run_config(tmp_path, "rnn", base=LSTM_CARTPOLE, resume=True, train_for_env_steps=25_000,
                              learning_rate=1e-9))
    assert second["env_steps"] >= 25_000
    resumed = core_weights(store.load("latest"))
    assert store.load("latest")["train_steps"] > saved["train_steps"]
    assert max(float((resumed[k] - cores[k]).abs().max()) for k in cores) < 1e-5


@slow("a run on a cluster of its own")
def test_a_recurrent_run_over_comms_reads_and_writes_states_by_rpc(tmp_path):
    """With DASKRL_FORCE_COMMS=1 every worker treats the others as another host: the inference worker reads and
    writes the states in the rollout worker's slots by RPC, and the learner fetches each slot's starting states
    with the rest of the slot in one round trip; the run trains."""
    with connect_cluster(n_workers=4, dashboard_address=None) as session:
        session.client.run(lambda: __import__("os").environ.__setitem__("DASKRL_FORCE_COMMS", "1"))
        summary = train(run_config(tmp_path, "comms", base=LSTM_CARTPOLE, inference="remote", train_for_env_steps=6_000,
                                   train_for_seconds=90.0), client=session.client)
        run_id = session.run_id
    assert summary["env_steps"] >= 6_000 and summary["episodes"] > 0
    assert summary["data_path"]["slots_comms"] > 0 and summary["data_path"]["slots_shm"] == 0
    assert summary["policy_version"] > 2 and not summary["incidents"], summary["incidents"]
    assert list_segments(run_id) == []
