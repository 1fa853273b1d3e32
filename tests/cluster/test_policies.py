"""Several policies (--num-policies) on real clusters: a rollout worker on the module's embedded cluster acting for two
policy sources whose parameters are told apart by their values; and training runs through daskrl.train, in which
each policy keeps its own parameters, optimizer, checkpoints, logs and inference workers, a lost learner takes only
its own policy down for a moment, PBT replaces the worst policy, and self-play beats its frozen snapshots.
"""

from __future__ import annotations

import csv
import itertools
import math
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from daskrl import train
from daskrl.config import Config
from daskrl.envs import probe_env
from daskrl.learning.checkpoints import CheckpointStore
from daskrl.runtime.actors.handles import spawn
from daskrl.testing.sampling import PolicySource, PolicySourceSetup, expected_log_probs, sample_slots

from ..helpers import Killer, recovery_of, run_config, slow

_ids = itertools.count()


@pytest.mark.parametrize("inference", ["inline", "remote"])
def test_each_policy_acts_for_its_own_columns_with_its_own_parameters(cluster, hosts, inference):
    """Two parameter sources (other seeds; version 1 for policy 0, 4 for policy 1): in every slot a rollout worker
    fills, a column's log-probs and versions name the policy its id says acted; with remote inference each policy's
    inference worker answers its own queue for its own columns."""
    config = Config.from_flat({"env": "CartPole-v1", "num_workers": 1, "num_envs_per_worker": 6, "rollout": 8,
                               "slots_per_split": 2, "num_policies": 2, "inference": inference,
                               "worker_num_splits": 1}).validate()
    spaces = probe_env("CartPole-v1")
    sources = [spawn(cluster.client, PolicySource, f"mpsource{next(_ids)}", run_id=cluster.run_id, worker=hosts[0],
                     setup=PolicySourceSetup(spaces, config.model, seed=k)) for k in range(2)]
    sources[0].call("publish")
    for _ in range(4):
        sources[1].call("publish")
    sampled = sample_slots(cluster, config, spaces, [s.call("desc") for s in sources], 10, f"mp{next(_ids)}")
    for source in sources:
        source.call("stop", timeout=30)
    kept, stats, served = sampled.kept, sampled.stats, sampled.served
    if inference == "inline":
        assert stats["policy_versions"] == [1, 4]
    else:
        assert min(served) > 0, served  # both policies' inference workers answered
    for slot in kept:
        ids = slot["policy_id"][:8]
        assert ids.tolist() == [[0, 1, 0, 1, 0, 1]] * 8  # round_robin: env g is policy g % 2 throughout
        np.testing.assert_array_equal(slot["policy_version"], np.where(ids == 0, 1, 4))
    ids, obs = (np.concatenate([slot[name][:-1] for slot in kept]) for name in ("policy_id", "obs"))  # steps 0..7
    actions, log_probs, versions = (np.concatenate([slot[name] for slot in kept])
                                    for name in ("actions", "log_probs", "policy_version"))
    for k in range(2):  # each column acted with its own policy's network (seed k) at its version
        expected = expected_log_probs(spaces, config.model, "float32", 1.0, obs, actions, versions, seed=k)
        np.testing.assert_allclose(log_probs[ids == k], expected[ids == k], atol=1e-5, rtol=1e-5)


#: CartPole on one rollout worker, a row twice a second (the policies' rows are checked, a Killer reads them)
ONE_WORKER = {"env": "CartPole-v1", "num_workers": 1, "report_interval": 0.5}


def _adam_moments(state: dict) -> torch.Tensor:
    return torch.cat([s["exp_avg"].reshape(-1) for s in state["optimizer"]["state"].values()])


@slow("two training runs")
def test_two_policies_train_apart_with_their_own_checkpoints_logs_and_resume(tmp_path):
    budget = 120_000
    config = run_config(tmp_path, "two", base=ONE_WORKER, num_policies=2, train_for_env_steps=budget, train_for_seconds=120)
    summary = train(config)
    assert summary["env_steps"] >= budget and summary["stop_reason"].startswith("reached"), summary
    exp = Path(config.experiment_dir)
    states = [CheckpointStore(exp / "checkpoints" / f"policy_{k}").load("latest") for k in range(2)]
    assert [s["policy"] for s in states] == [0, 1]
    assert not list((exp / "checkpoints").glob("checkpoint_*.pt")), "one policy's checkpoints live in policy_<k>/"
    # never the same parameters or optimizer state: each learner trained its own policy on its own samples
    for key in states[0]["model"]:
        if states[0]["model"][key].dtype.is_floating_point and states[0]["model"][key].numel() > 1:
            assert not torch.equal(states[0]["model"][key], states[1]["model"][key]), key
    assert not torch.allclose(_adam_moments(states[0]), _adam_moments(states[1]))
    # round_robin over one worker's 32 envs: each policy played half the columns, and trained on only those
    trained = [s["samples_trained"] for s in states]
    assert all(0.4 * sum(trained) <= n <= 0.6 * sum(trained) for n in trained), trained
    assert sum(trained) <= summary["env_steps"]
    with open(exp / "policies.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["policy"] for r in rows} == {"0", "1"}
    last = {r["policy"]: r for r in rows[-2:]}
    assert all(int(last[k]["episodes"]) > 0 and float(last[k]["episode_return_mean"]) > 20 for k in "01"), last
    assert [p["policy"] for p in summary["policies"]] == [0, 1]
    events = list((exp / "tensorboard").glob("events.out.tfevents.*"))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = EventAccumulator(str(events[0])).Reload().Tags()["scalars"]
    assert {"policy_0/episode_return_mean", "policy_1/episode_return_mean"} <= set(tags)

    # --resume: each policy goes on from its own checkpoint (its version and Adam steps continue)
    resumed = train(config.replace(resume=True, train_for_env_steps=budget + 40_000))
    after = [CheckpointStore(exp / "checkpoints" / f"policy_{k}").load("latest") for k in range(2)]
    for before, now in zip(states, after, strict=True):
        assert now["policy_version"] > before["policy_version"]
        assert now["train_steps"] > before["train_steps"]
    assert resumed["env_steps"] >= budget + 40_000


@slow("a 60k-step run")
def test_two_policies_with_remote_inference_each_have_their_own_inference_workers(tmp_path):
    config = run_config(tmp_path, "remote", base=ONE_WORKER, num_policies=2, inference="remote",
                        num_inference_workers=1, train_for_env_steps=60_000, train_for_seconds=120)
    summary = train(config)
    assert summary["env_steps"] >= 60_000, summary
    trained = [p["policy_version"] for p in summary["policies"]]
    assert all(v > 3 for v in trained), summary["policies"]
    states = [CheckpointStore(Path(config.experiment_dir) / "checkpoints" / f"policy_{k}").load("latest")
              for k in range(2)]
    samples = [s["samples_trained"] for s in states]
    assert all(0.4 * sum(samples) <= n <= 0.6 * sum(samples) for n in samples), samples


@slow("a SIGKILL drill")
def test_losing_one_policys_learner_restarts_it_alone(tmp_path, capsys):
    budget = 250_000
    config = run_config(tmp_path, "lose_p1", base=ONE_WORKER, num_policies=2, train_for_env_steps=budget,
                        train_for_seconds=150, checkpoint_interval=1.0)
    store = CheckpointStore(Path(config.experiment_dir) / "checkpoints" / "policy_1")

    def after_policy_1s_first_checkpoint() -> None:  # a fast start reaches 60k steps before the first one
        deadline = time.monotonic() + 60
        while store.latest() is None and time.monotonic() < deadline:
            time.sleep(0.01)

    killer = Killer("learner_p1", ready=lambda row: row["env_steps"] >= 60_000, wait=after_policy_1s_first_checkpoint)
    summary = train(config, on_report=killer)
    out = capsys.readouterr().out
    killer.check()
    assert summary["stop_reason"].startswith("reached") and summary["env_steps"] >= budget, summary
    assert [r["component"] for r in summary["recoveries"]] == ["learner_p1"]
    assert recovery_of(summary, "learner_p1")["role"] == "learner"
    assert "policy 1's learner restarts from checkpoint_" in out, out
    with open(Path(config.experiment_dir) / "policies.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    versions_p0 = [int(r["policy_version"]) for r in rows if r["policy"] == "0"]
    assert versions_p0 == sorted(versions_p0), "policy 0's learner never restarted: its versions only grow"
    p1 = [(float(r["time_s"]), int(r["policy_version"])) for r in rows if r["policy"] == "1"]
    assert p1[-1][1] > max(v for _, v in p1[: len(p1) // 3]), "policy 1 trained on after its restart"
    assert all(s["episode_return_mean"] > 20 for s in summary["policies"]), summary["policies"]


@slow("a 200k-step PBT run")
def test_pbt_replaces_the_worst_policy_with_a_mutated_copy_of_a_better_one(tmp_path):
    config = run_config(tmp_path, "pbt", base=ONE_WORKER, num_policies=3, pbt=True, pbt_period_env_steps=40_000,
                        train_for_env_steps=200_000, train_for_seconds=120)
    summary = train(config)
    exp = Path(config.experiment_dir)
    with open(exp / "pbt.csv", newline="") as f:
        events = list(csv.DictReader(f))
    assert events and summary["pbt"], "no exploit event in 200k steps of 3 CartPole policies"
    for e in events:
        assert e["target"] != e["source"] and float(e["target_return"]) < float(e["source_return"]), e
        assert 1e-5 <= float(e["learning_rate_after"]) <= 1e-2 and 0.05 <= float(e["clip_ratio_after"]) <= 0.5
        assert 0.9 <= float(e["gamma_after"]) < 1.0
    # the hyperparameters a replaced policy ended with are those of its last replacement, unless replaced again
    last = {}
    for e in events:
        last[int(e["target"])] = e
    final = {p["policy"]: p["hyperparams"] for p in summary["policies"]}
    for target, e in last.items():
        for name in ("learning_rate", "entropy_coef", "clip_ratio", "gamma"):
            assert math.isclose(final[target][name], float(e[f"{name}_after"]), rel_tol=1e-12), (target, name)


def test_self_play_beats_its_frozen_snapshots_more_and_more_and_never_trains_on_their_moves(tmp_path):
    """Race to ten (a turn game with a perfect strategy): policy 0 plays one seat, two frozen snapshots of itself,
    refreshed every 15 versions, the other; selfplay.csv names each opponent by the version it holds. (Every 5, a
    fast machine went past version 15 within the first report, so the initial weights' games were mostly those of
    a policy as untrained as they: the snapshots are held long enough to be beaten, whatever the machine's speed.)"""
    budget = 120_000
    config = Config().replace(train_dir=str(tmp_path), experiment="selfplay", dashboard_address="",
                              report_interval=0.25, env="daskrl.testing.environments.envs:race_to_ten", num_workers=1,
                              num_envs_per_worker=16, self_play_snapshots=2, self_play_snapshot_every=15,
                              entropy_coef=0.01, train_for_env_steps=budget, train_for_seconds=150)
    summary = train(config)
    assert summary["env_steps"] >= budget, summary
    with open(Path(config.experiment_dir) / "selfplay.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["opponent"] for r in rows} == {"snapshot_0", "snapshot_1"}
    versions = {int(r["opponent_version"]) for r in rows}
    assert all(v == 1 or v % 15 == 0 for v in versions) and len(versions) > 3, versions
    assert all(r["policy"] == "0" for r in rows)
    # against each frozen opponent the win rate rises while it stays frozen (the first player can always win, so
    # once both sides play well it settles at one half: the seats alternate)
    # (a tenure is one snapshot slot holding one version; each row counts the games of one report window, and
    # windows of under 50 games say little)
    tenures: dict[tuple[str, int], list[float]] = {}
    for r in rows:
        if int(r["games"]) >= 50:
            tenures.setdefault((r["opponent"], int(r["opponent_version"])), []).append(float(r["win_rate"]))
    rises = {key: rates[-1] - rates[0] for key, rates in sorted(tenures.items()) if len(rates) >= 2}
    assert rises and sum(rises.values()) > 0, tenures
    initial = [rate for (_, version), rates in tenures.items() if version == 1 for rate in rates]
    assert max(initial) >= 0.75, initial  # the initial weights: beaten
    # a game is one move per env step, half of them policy 0's: it trained on its own moves only
    state = CheckpointStore(Path(config.experiment_dir) / "checkpoints").load("latest")
    assert 0.3 * summary["env_steps"] <= state["samples_trained"] <= 0.55 * summary["env_steps"], \
        (state["samples_trained"], summary["env_steps"])
    # the run's episodes are policy 0's side of its games only (the snapshots' sides are not its returns)
    games = sum(int(r["games"]) for r in rows)
    assert 0.8 * summary["episodes"] <= games <= summary["episodes"], (games, summary["episodes"])  # the last
