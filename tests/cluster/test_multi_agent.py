"""Multi-agent envs as agent columns (daskrl/envs/multi_agent.py) in real runs: a rollout worker on the module's
embedded cluster marks the steps of finished agents and credits each agent's episode; runs through daskrl.train on
embedded clusters of their own train two CartPoles in one env, MPE2's simple_spread with the MPE defaults, and
simple_adversary's agents of different spaces as two policies."""

from __future__ import annotations

import math

import numpy as np
import pytest

from daskrl.envs import probe_env

from ..helpers import slow


def test_a_rollout_worker_marks_the_steps_of_finished_agents_and_credits_each_agents_episode(cluster, hosts):
    """Staggered agents (2, 3 and 4 steps per episode of 4 steps): in the slots a real rollout worker fills, an agent's
    column says policy 0 exactly while it acts and nobody (-1) after it left; every agent's episode is reported
    with its exact return, its own length and the policy that played it; env steps count envs, not agents."""
    from daskrl.config import Config
    from daskrl.runtime.actors.handles import spawn
    from daskrl.testing.sampling import PolicySource, PolicySourceSetup, sample_slots

    spec = "daskrl.testing.environments.envs:staggered"
    config = Config.from_flat({"env": spec, "num_workers": 1, "num_envs_per_worker": 2, "rollout": 5,
                               "slots_per_split": 2}).validate()
    spaces = probe_env(spec)
    assert spaces.num_agents == 3
    source = spawn(cluster.client, PolicySource, "ma_source", run_id=cluster.run_id, worker=hosts[0],
                   setup=PolicySourceSetup(spaces, config.model))
    source.call("publish")
    sampled = sample_slots(cluster, config, spaces, [source.call("desc")], 8, "ma")
    source.call("stop", timeout=30)
    kept, final = sampled.kept, sampled.final
    lengths = (2, 3, 4)
    for i, slot in enumerate(kept):
        for t in range(5):
            step = (i * 5 + t) % 4  # the step of the 4-step episode both envs are at
            expected = [0 if step < lengths[k] else -1 for k in range(3)] * 2
            assert slot["policy_id"][t].tolist() == expected, (i, t)
            assert (slot["rewards"][t][np.array(expected) < 0] == 0).all()
    episodes = sorted(set(map(tuple, final["episodes"])))
    # (return, own length, policy, the other agents' policy and its version): one shared policy, version 1
    assert episodes == [(203.0, 2, 0, 0, 1), (606.0, 3, 0, 0, 1), (1210.0, 4, 0, 0, 1)], episodes
    assert final["env_steps"] % 2 == 0 and final["slots_filled"] * 5 * 2 <= final["env_steps"]


@pytest.mark.parametrize("inference", ["inline", "remote"])
@slow("trains to a return")
def test_two_cartpoles_in_one_multi_agent_env_learn_like_cartpole(tmp_path, inference):
    """Agents that fall at different times: masked steps, per-agent episodes and the learner's cut, end to end."""
    from daskrl import train
    from daskrl.config import Config

    config = Config().replace(train_dir=str(tmp_path), experiment="twins", dashboard_address="", report_interval=0.5,
                              env="daskrl.testing.environments.envs:twin_cartpoles", inference=inference, stop_at_return=475,
                              train_for_seconds=90)
    summary = train(config)
    assert summary["reached_return_at_s"] is not None, summary
    assert summary["episode_return_mean"] >= 475


def test_mpe2_simple_spread_trains_from_its_spec_with_the_mpe_defaults(tmp_path, capsys):
    pytest.importorskip("mpe2", reason="the multiagent extra (pip install 'daskrl[multiagent]') is not installed")
    from daskrl import train
    from daskrl.config import Config

    config = Config().replace(train_dir=str(tmp_path), experiment="spread", dashboard_address="", report_interval=0.5,
                              env="mpe2.simple_spread_v3:parallel_env", num_workers=1, num_envs_per_worker=8,
                              train_for_env_steps=6_000, train_for_seconds=90)
    summary = train(config)
    out = capsys.readouterr().out
    assert "defaults for MPE (PettingZoo) envs: --rollout 25 --num-batches-per-epoch 8 --num-epochs 10" in out, out
    assert summary["env_steps"] >= 6_000 and summary["policy_version"] > 2, summary
    # every agent's episode is the env's 25 steps, 3 agents per env episode
    assert summary["episodes"] >= 3 * 8 * (6_000 // 8 // 25) * 0.9, summary["episodes"]


@pytest.mark.parametrize("inference", ["inline", "remote"])
@slow("trains two policies")
def test_agents_of_different_spaces_train_their_own_policies(tmp_path, inference):
    """simple_adversary: the adversary (8 observations) is policy 0, the good agents (10) policy 1; each learner
    and each sampler's copy builds its network from its own agents' spaces, on the padded slots."""
    pytest.importorskip("mpe2", reason="the multiagent extra (pip install 'daskrl[multiagent]') is not installed")
    import csv
    from pathlib import Path

    from daskrl import train
    from daskrl.config import Config
    from daskrl.learning.checkpoints import CheckpointStore

    config = Config().replace(train_dir=str(tmp_path), experiment="adversary", dashboard_address="",
                              report_interval=0.5, env="mpe2.simple_adversary_v3:parallel_env", num_policies=2,
                              policy_mapping="daskrl.testing.mappings:by_role", inference=inference, num_workers=1,
                              num_envs_per_worker=8, train_for_env_steps=10_000, train_for_seconds=120)
    summary = train(config)
    assert summary["stop_reason"].startswith("reached"), summary
    exp = Path(config.experiment_dir)
    states = [CheckpointStore(exp / "checkpoints" / f"policy_{k}").load("latest") for k in range(2)]
    assert all(s["policy_version"] >= 2 for s in states), [s["policy_version"] for s in states]
    first_layers = [next(v for k, v in s["model"].items() if k.endswith("weight") and v.ndim == 2) for s in states]
    assert [w.shape[1] for w in first_layers] == [8, 10]
    with open(exp / "policies.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    last = {r["policy"]: r for r in rows[-2:]}
    assert set(last) == {"0", "1"} and all(int(last[k]["episodes"]) > 0 for k in "01"), last
    assert int(last["1"]["episodes"]) == 2 * int(last["0"]["episodes"])  # two good agents per adversary
    assert all(math.isfinite(float(last[k]["episode_return_mean"])) for k in "01")
