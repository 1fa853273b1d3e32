"""Turn-based credit in the learner's per-policy cut of a tagged slot (daskrl/learning/turns.py): a player's own turns
are compacted with what the other players' moves gave it, the trainer's V-trace/GAE targets are those of the
compacted sequence, other columns are untouched, and real tictactoe games keep every player's return."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
import torch

from daskrl.algo.appo import trainer as trainer_module
from daskrl.algo.appo.trainer import APPOTrainer
from daskrl.config import LearnerConfig, ModelConfig
from daskrl.envs.layouts.dict_obs import unpack
from daskrl.envs.multi_agent import MultiAgentGroup, multi_agent_spaces
from daskrl.learning.slot_reader import SLOT_FIELDS, STATE_FIELDS, PolicyColumns, join_parts
from daskrl.learning.turns import interleaved
from daskrl.models.actor_critic import build_model
from daskrl.runtime import dask_internals
from daskrl.sampling.slots.trajectories import SlotLayout
from daskrl.testing.environments.envs import staggered, take_turns

T, B = 8, 4
GAMMA = 0.9
NOBODY = -1


def turn_slot(time_limit: bool) -> dict[str, np.ndarray]:
    """A hand-built tagged slot. Columns 0 and 1: player 1 (policy 0) and player 2 (policy 1) of a two-player game.
    Game 1: p1 moves at steps 0, 2, p2 at 1, 3, and p2's move at 3 ends it (p1 -1, p2 +1; a time limit with
    ``time_limit``). Game 2: p1 at 4, 6 and again at step T, p2 at 5, 7. Rewards the other's move gave a player
    sit on the other's rows. Column 2: a single-agent env of policy 0 (an episode ends at step 4). Column 3: a
    parallel env's agent of policy 1 that finished at step 2 (a time limit) and is back at step 6."""
    ids = np.full((T + 1, B), NOBODY, np.int8)
    ids[[0, 2, 4, 6, 8], 0] = 0
    ids[[1, 3, 5, 7], 1] = 1
    ids[:, 2] = 0
    ids[[0, 1, 2, 6, 7, 8], 3] = 1
    obs = np.zeros((T + 1, B, 2), np.float32)
    for c in range(B):
        for t in range(T + 1):
            if ids[t, c] != NOBODY:
                obs[t, c] = [c + 1, t + 1]
    rewards = np.zeros((T, B), np.float32)
    rewards[[1, 3, 5, 6, 7], 0] = [0.5, -1.0, 0.2, 0.1, 0.05]  # p1: 0.5 for its move at 0, -1 for the one at 2 ...
    rewards[[0, 2, 3, 4, 5, 7], 1] = [0.25, 0.3, 1.0, 0.7, 0.4, 0.6]  # p2: 0.25 is the last slot's, 0.7 game 2's
    rewards[:, 2] = np.arange(T) + 1.0
    rewards[[0, 1, 2, 6, 7], 3] = [10, 20, 30, 40, 50]
    ended = np.zeros((T, B), np.uint8)
    ended[3, [0, 1]] = 1
    terminated, truncated = (np.zeros_like(ended), ended) if time_limit else (ended, np.zeros_like(ended))
    terminated[4, 2] = 1
    truncated[2, 3] = 1
    final_at = np.array([2 * B + 3] + ([3 * B, 3 * B + 1] if time_limit else []), np.int32)
    final_obs = np.array([[44, 44]] + ([[9, 9], [8, 8]] if time_limit else []), np.float32)
    return {"obs": obs, "actions": ((np.arange(T)[:, None] + np.arange(B)) % 3).astype(np.int64),
            "rewards": rewards, "terminated": terminated, "truncated": truncated,
            "log_probs": np.full((T, B), -1.0, np.float32), "policy_version": np.full((T, B), 5, np.int32),
            "final_at": final_at, "final_obs": final_obs, "policy_id": ids}


def cut(part: dict[str, np.ndarray], policy: int, state_fields: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    return PolicyColumns(policy).take({k: v.copy() for k, v in part.items()}, state_fields)


@pytest.mark.parametrize("time_limit", [False, True])
def test_each_players_turns_are_compacted_with_what_the_others_moves_gave_it(time_limit):
    part = turn_slot(time_limit)
    p1, p2 = cut(part, 0), cut(part, 1)
    ended = [0, 1, 0, 0, 0, 0, 0, 0]
    # player 1 (cut column 0): own steps 0, 2, 4, 6; its last range [6, T) has no end and step T is its turn
    np.testing.assert_allclose(p1["rewards"][:, 0], [0.5, -1.0, 0.2, 0.15, 0, 0, 0, 0], rtol=1e-6)
    assert p1["terminated"][:, 0].tolist() == ([0] * 8 if time_limit else ended)
    assert p1["truncated"][:, 0].tolist() == [0, int(time_limit), 0, 1, 0, 0, 0, 0]
    assert p1["valid"][:, 0].tolist() == [True] * 4 + [False] * 4
    assert p1["obs"][:, 0].tolist() == [[1, 1], [1, 3], [1, 5], [1, 7]] + [[0, 0]] * 5
    assert p1["actions"][:4, 0].tolist() == [0, 2, 1, 0] and not p1["actions"][4:, 0].any()
    # player 2 (cut column 0): step 0 was the last slot's move's, step 4 came after its game ended, before its
    # first move of the next; its last move (7) has its next turn in the next slot: a guess, out of the loss
    np.testing.assert_allclose(p2["rewards"][:, 0], [0.3, 1.0, 0.4, 0.6, 0, 0, 0, 0], rtol=1e-6)
    assert p2["terminated"][:, 0].tolist() == ([0] * 8 if time_limit else ended)
    assert p2["truncated"][:, 0].tolist() == [0, int(time_limit), 0, 1, 0, 0, 0, 0]
    assert p2["valid"][:, 0].tolist() == [True] * 3 + [False] * 5
    assert p2["obs"][:, 0].tolist() == [[2, 2], [2, 4], [2, 6], [2, 8]] + [[0, 0]] * 5
    # finals: player 1 bootstraps from obs[T] (its turn), player 2 from its own last observation; a time limit's
    # final observations moved to the row whose range holds their step (K = 2 columns per cut)
    finals1 = dict(zip(p1["final_at"].tolist(), p1["final_obs"].tolist(), strict=True))
    finals2 = dict(zip(p2["final_at"].tolist(), p2["final_obs"].tolist(), strict=True))
    assert finals1 == {3 * 2: [1, 9], **({1 * 2: [9, 9]} if time_limit else {})}
    assert finals2 == {3 * 2: [2, 8], 2 * 2 + 1: [44, 44], **({1 * 2: [8, 8]} if time_limit else {})}
    # the single-agent column and the parallel agent that finished early come out as they went in
    for got, c in ((p1, 2), (p2, 3)):
        for name in ("obs", "actions", "rewards", "terminated", "truncated", "log_probs", "policy_version"):
            assert np.array_equal(got[name][:, 1], part[name][:, c]), name
        assert np.array_equal(got["valid"][:, 1], part["policy_id"][:T, c] >= 0)


def test_columns_without_turns_cost_nothing_but_the_check():
    rng = np.random.default_rng(3)
    ids = np.where(rng.random((T + 1, 6)) < 0.5, 0, 1).astype(np.int8)
    ids[:] = ids[0]
    done = np.zeros((T, 6), np.uint8)
    switch = rng.random((T, 6)) < 0.3  # a policy change only after an episode ended (as policy maps do)
    for t in range(T):
        done[t] = switch[t]
        ids[t + 1] = np.where(switch[t], rng.integers(0, 2, 6), ids[t])
    part = {"obs": rng.normal(size=(T + 1, 6, 3)).astype(np.float32), "actions": rng.integers(0, 4, (T, 6)),
            "rewards": rng.normal(size=(T, 6)).astype(np.float32), "terminated": done,
            "truncated": np.zeros_like(done), "log_probs": rng.normal(size=(T, 6)).astype(np.float32),
            "policy_version": rng.integers(0, 9, (T, 6)).astype(np.int32), "final_at": np.zeros(0, np.int32),
            "final_obs": np.zeros((0, 3), np.float32), "policy_id": ids}
    for policy in (0, 1):
        assert not interleaved(ids == policy, done.astype(bool)).any()  # the one check they cost
        got = cut(part, policy)
        columns = np.flatnonzero((ids[:T] == policy).any(0))
        for name in ("obs", "actions", "rewards", "terminated", "truncated", "log_probs", "policy_version"):
            assert np.array_equal(got[name], part[name][:, columns]), name
        assert np.array_equal(got["valid"], ids[:T, columns] == policy)


def test_a_recurrent_players_state_starts_afresh_when_its_episode_ended_before_its_first_turn():
    part = turn_slot(time_limit=False)
    part["terminated"][0, 1] = 1  # player 2's last game ended on step 0, player 1's move: its state was reset there
    part["rnn_states"] = np.ones((B, 3), np.float32)
    assert cut(part, 1, STATE_FIELDS)["rnn_states"].tolist() == [[0, 0, 0], [1, 1, 1]]  # columns 1 and 3
    assert cut(part, 0, STATE_FIELDS)["rnn_states"].tolist() == [[1, 1, 1], [1, 1, 1]]  # columns 0 and 2


def record(group: MultiAgentGroup, policies: list[int], slots: int, seed: int) -> tuple[dict, list, list]:
    """Step ``group`` with random legal moves into a real slot layout of ``slots`` slots, as a rollout worker does
    (policy ids per step, step T's ids at the slot's end, time-limit finals, the next slot's obs[0]). Returns the
    slot arrays, each column's own steps as ``(slot, t, episode)`` and the finished episodes as
    ``(column, episode, return, own steps)``."""
    layout = SlotLayout.for_worker(group.spaces, group.num_envs, 1, T, slots, tagged=True)
    a = {name: np.zeros(shape, dtype) for name, (shape, dtype) in layout.shapes().items()}
    a["final_at"][:] = -1
    mask_key = group.spaces.action_mask_key
    rng = np.random.default_rng(seed)
    column_policy = np.array(policies * group.num_envs)[:group.num_envs]
    turns: list[tuple[int, int, int, int]] = []
    episodes: list[tuple[int, int, float, int]] = []
    group.reset(a["obs"][0, 0])
    for s in range(slots):
        if s:
            a["obs"][s, 0] = a["obs"][s - 1, T]
        finals = 0
        for t in range(T):
            ids = np.where(group.active, column_policy, NOBODY)
            a["policy_id"][s, t] = ids
            if mask_key:
                masks = unpack(a["obs"][s, t], group.spaces.obs_keys)[mask_key]
                actions = np.array([rng.choice(np.flatnonzero(m)) if m.any() else 0 for m in masks])
            else:
                actions = rng.integers(0, 3, group.num_envs)
            a["actions"][s, t] = actions
            game = [group.episode_index[c // group.num_agents] for c in range(group.num_envs)]
            turns.extend((c, s, t, game[c]) for c in np.flatnonzero(ids >= 0))
            group.step(actions, a["obs"][s, t + 1], a["rewards"][s, t], a["terminated"][s, t], a["truncated"][s, t])
            for c, final in group.pop_truncations():
                a["final_obs"][s, finals], a["final_at"][s, finals] = final, t * group.num_envs + c
                finals += 1
            episodes.extend((c, game[c], ret, n) for ret, n, c in group.pop_episode_stats())
        a["policy_id"][s, T] = np.where(group.active, column_policy, NOBODY)
    return a, turns, episodes


def slot_part(a: dict, s: int) -> dict[str, np.ndarray]:
    """What the batcher reads of slot ``s`` (the time-limit finals trimmed to those used)."""
    part = {name: a[name][s].copy() for name in (*SLOT_FIELDS, "policy_id")}
    used = int((part["final_at"] >= 0).sum())
    part["final_obs"], part["final_at"] = part["final_obs"][:used], part["final_at"][:used]
    return part


def test_a_parallel_envs_agents_that_finish_early_are_untouched():
    group = MultiAgentGroup([staggered(), staggered(lengths=(3, 1, 5))])
    a, _, _ = record(group, [0, 1, 0], slots=3, seed=0)
    for s in range(3):
        part = slot_part(a, s)
        for policy in (0, 1):
            got = cut(part, policy)
            columns = np.flatnonzero((part["policy_id"][:T] == policy).any(0))
            for name in ("obs", "actions", "rewards", "terminated", "truncated", "log_probs", "policy_version"):
                assert np.array_equal(got[name], part[name][:, columns]), name
            assert got["final_at"].size == np.isin(part["final_at"] % group.num_envs, columns).sum()


def test_tictactoe_games_keep_each_players_return_on_its_own_turns():
    pytest.importorskip("pettingzoo.classic", reason="pettingzoo's classic games are not installed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        group = MultiAgentGroup.from_spec("pettingzoo.classic.tictactoe.tictactoe:env", 3, seed=5)
    slots = 24
    a, turns, episodes = record(group, [0, 1], slots, seed=1)
    # each column's compacted rows, slot by slot, in the order of its own turns
    rows: dict[int, list[tuple[int, float, bool, bool, bool]]] = {c: [] for c in range(group.num_envs)}
    for s in range(slots):
        part = slot_part(a, s)
        for policy in (0, 1):
            got = cut(part, policy)
            columns = np.flatnonzero((part["policy_id"][:T] == policy).any(0))
            for k, c in enumerate(columns):
                own = int((part["policy_id"][:T, c] == policy).sum())
                assert not got["valid"][own:, k].any() and not got["rewards"][own:, k].any()
                for i in range(own):
                    rows[c].append((s, float(got["rewards"][i, k]), bool(got["terminated"][i, k]),
                                    bool(got["truncated"][i, k]), bool(got["valid"][i, k])))
    game_of = {c: [g for cc, _, _, g in turns if cc == c] for c in rows}
    checked = lost = 0
    for c, game, ret, length in episodes:
        mine = [r for r, g in zip(rows[c], game_of[c], strict=True) if g == game]
        assert len(mine) == length
        last = mine[-1]
        if last[2]:  # its end is on its last own turn: the return is all there, and nothing else ends it
            assert sum(r[1] for r in mine) == pytest.approx(ret)
            assert [r[2] for r in mine] == [False] * (length - 1) + [True] and not last[3]
            checked += 1
        else:  # it ended on the next slot's first steps, before this player's turn there: the result is lost
            assert last[3] and not last[4] and sum(r[1] for r in mine) == 0
            lost += 1
        # a truncation is always a slot's last own row (no time limit here); only those can leave the loss
        for r, nxt in zip(mine, mine[1:], strict=False):
            assert not r[3] or nxt[0] != r[0]
    assert checked >= 40 and lost <= checked // 5, (checked, lost)
    # only a slot's last own row is left out of the loss: a guess, truncated
    assert all(r[4] or r[3] for v in rows.values() for r in v)


@pytest.mark.parametrize("advantage", ["vtrace", "gae"])
def test_the_trainers_targets_are_those_of_each_players_own_turns(monkeypatch, advantage):
    spaces = multi_agent_spaces(take_turns())
    cfg = dataclasses.replace(LearnerConfig(), gamma=GAMMA, normalize_returns=False, advantage=advantage,
                              gae_lambda=1.0, batch_size=T * 2, num_epochs=1)
    seen: dict[str, torch.Tensor] = {}
    estimator = getattr(trainer_module, advantage)

    def spy(*args, **kwargs):
        out = estimator(*args, **kwargs)
        seen["targets"] = out[0] if advantage == "vtrace" else out[1]  # vs; GAE's returns
        return out

    monkeypatch.setattr(trainer_module, advantage, spy)
    for policy, rewards, bootstraps in (
            (0, [0.5, -1.0, 0.2, 0.15], {1: [9, 9], 3: [1, 9]}),  # game 1 cut by its time limit; obs[T] is its turn
            (1, [0.3, 1.0, 0.4, 0.6], {1: [8, 8], 3: [2, 8]})):  # its last move: its own last observation
        model = build_model(spaces, ModelConfig(normalize_obs=False), seed=0)
        part = turn_slot(time_limit=True)
        with torch.no_grad():  # behaviour = target: the targets are n-step returns up to each end or bootstrap
            lp, _, _ = model.evaluate(torch.from_numpy(part["obs"][:T].reshape(T * B, 2)),
                                      torch.from_numpy(part["actions"].reshape(-1)))
            values = {k: float(model.value(torch.tensor([o], dtype=torch.float32))[0]) for k, o in bootstraps.items()}
        part["log_probs"] = lp.reshape(T, B).numpy()
        expected, running = [0.0] * 4, 0.0
        for k in range(3, -1, -1):
            running = rewards[k] + GAMMA * (values[k] if k in values else running)
            expected[k] = running
        batch = join_parts([cut(part, policy)])
        APPOTrainer(model, cfg, 0).train(batch, current_version=5)
        valid = batch.valid[:4, 0]
        assert valid.tolist() == [True, True, True, policy == 0]
        np.testing.assert_allclose(seen["targets"][:4, 0].numpy()[valid], np.array(expected)[valid], rtol=1e-5)


def test_a_rollout_worker_says_who_acts_at_step_T(inproc):
    """A real rollout worker (tictactoe, a policy per player): each slot's step T policy ids are the next slot's
    step 0 ones (written at the slot's end; the collector poisons every slot it hands back)."""
    pytest.importorskip("pettingzoo.classic", reason="pettingzoo's classic games are not installed")
    from daskrl.config import Config
    from daskrl.driver.fleet.role_setups import role_setups
    from daskrl.envs import probe_env
    from daskrl.protocol import wire_rollout
    from daskrl.runtime import spawn
    from daskrl.sampling.rollout_worker import RolloutWorker
    from daskrl.testing.sampling import CollectorSetup, SlotCollector

    from ..helpers import wait_for

    env = "pettingzoo.classic.tictactoe.tictactoe:env"
    config = Config.from_flat({"env": env, "num_workers": 1, "num_envs_per_worker": 2, "worker_num_splits": 1,
                               "rollout": T, "slots_per_split": 2, "num_policies": 2,
                               "policy_mapping": "round_robin"}).validate()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        setup = role_setups(config, probe_env(env)).rollout[0]
    hosts = sorted(dask_internals.cluster_workers(inproc.client))
    rollout = spawn(inproc.client, RolloutWorker, "rollout_turns", run_id=inproc.run_id, worker=hosts[0], setup=setup)
    collector = spawn(inproc.client, SlotCollector, "collector_turns", run_id=inproc.run_id, worker=hosts[1],
                      setup=CollectorSetup(max_keep=12))
    try:
        wire_rollout(inproc.client, rollout, [collector.on_trajectory])
        collector.call("attach_workers", {rollout.name: rollout.call("buffers")})
        collector.call("start")
        rollout.call("start")
        wait_for(lambda: collector.call("stats")["kept"] >= 12, what="12 slots")
        kept = [k["arrays"] for k in collector.call("collected")]
    finally:
        for handle in (rollout, collector):
            handle.call("stop", timeout=30)
    assert all(k["policy_id"].shape == (T + 1, 4) for k in kept)
    follows = [b for a, b in zip(kept, kept[1:], strict=False) if np.array_equal(a["obs"][T], b["obs"][0])]
    assert len(follows) >= 8  # one split: slots come in order
    for a, b in zip(kept, kept[1:], strict=False):
        assert np.array_equal(a["policy_id"][T], b["policy_id"][0])
        assert set(np.unique(a["policy_id"][T])) <= {-1, 0, 1}
