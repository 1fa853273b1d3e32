"""DQN end to end: a CartPole run through daskrl.train on its embedded cluster, with the learner's fast paths and with
plain torch, learns to balance, keeps its update-to-data ratio and checkpoints its target network, and its
checkpoint plays greedily."""

from __future__ import annotations

import pytest

from ..helpers import DQN_CARTPOLE, run_config
from ..helpers import slow as slow_marker


@slow_marker("a DQN run on CartPole until its greedy-ish policy balances (about 10 s of training on 2 cores)")
@pytest.mark.parametrize("kernels", ["auto", "off"])
def test_dqn_learns_cartpole_and_its_checkpoint_plays_greedily(tmp_path, kernels):
    """With the learner's fast paths (--learner-kernels auto) and with plain torch (off) alike."""
    from daskrl import train
    from daskrl.evaluation.episodes import enjoy
    from daskrl.learning.checkpoints import CheckpointStore

    config = run_config(tmp_path, "dqn", base=DQN_CARTPOLE, stop_at_return=150, stop_window=30,
                        train_for_env_steps=60_000, train_for_seconds=150, report_interval=1.0, learner_kernels=kernels)
    summary = train(config)
    assert summary["episode_return_mean"] >= 150, summary  # random play: about 22
    assert "stop-at-return" in summary["stop_reason"]
    # every slot went through the shard (8 envs x 16 steps each; a few may be in flight at the stop)
    assert {"learner", "replay_0", "rollout_0"} <= set(summary["data_path"]["components"])
    assert summary["data_path"]["slots_shm"] * 8 * 16 == pytest.approx(summary["env_steps"], abs=3 * 8 * 16 * 3)
    # the update-to-data ratio held both ways: one update per 4 env steps after the first 500
    state = CheckpointStore(tmp_path / "dqn" / "checkpoints").load("latest")
    trained = state["train_steps"]
    assert trained == pytest.approx(0.25 * (summary["env_steps"] - 500), rel=0.15), (trained, summary["env_steps"])
    assert "target" in state  # the target network is checkpointed with the online one
    assert state["optimizer"]["param_groups"][0]["fused"] is (True if kernels == "auto" else None)
    played = enjoy(str(tmp_path / "dqn"), episodes=3, which="latest")
    assert played["return_mean"] >= 100, played
