"""--record-schedule and ``daskrl replay``: an asynchronous run, recorded, then re-executed in one process, gives the
run's weights and optimizer bit for bit (at its last checkpoint and at an earlier one, --until-step) and every step's
metrics, on the numpy path and with the torch model; a hyperparameter set while it trained is replayed; what a replay
cannot re-create is refused in one line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from daskrl import start, train
from daskrl.config import Config, ConfigError
from daskrl.learning.checkpoints import CheckpointStore
from daskrl.rerun import replay_experiment

from ..helpers import run_config

#: asynchronous CartPole: two rollout workers of two splits each, so the learner takes slots in whatever order they
#: come and each split acts with whatever version is newest; a checkpoint every second, so several are kept
RECORDED_CARTPOLE = {"env": "CartPole-v1", "record_schedule": True, "seed": 3, "num_workers": 2,
                     "num_envs_per_worker": 8, "worker_num_splits": 2, "rollout": 32, "batch_size": 512,
                     "train_for_env_steps": 80_000, "checkpoint_interval": 1.0}


def recorded_run(tmp_path: Path, name: str, **options) -> Path:
    """A recorded run in which the entropy coefficient is changed once it has trained a few steps."""
    with start(run_config(tmp_path, name, base=RECORDED_CARTPOLE, **options)) as run:
        deadline = time.monotonic() + 120
        while run.status()["policy_version"] < 6 and not run.done and time.monotonic() < deadline:
            time.sleep(0.05)
        run.set(entropy_coef=0.02)
        summary = run.wait(timeout=300)
    return Path(summary["experiment_dir"])


def run_checkpoint_steps(experiment_dir: Path) -> list[int]:
    store = CheckpointStore(experiment_dir / "checkpoints")
    return sorted(int(store.load(store.path_of(n))["train_steps"]) for n in store.steps())


#: an LSTM on Dict observations (daskrl/testing/environments: CueEnv): the torch model acts, not the numpy path
RECURRENT_DICT = {"env": "daskrl.testing.environments.envs:cue", "rnn": "lstm", "rollout": 16, "batch_size": 256,
                  "train_for_env_steps": 20_000}


@pytest.mark.parametrize("options", [{}, RECURRENT_DICT], ids=["mlp on the numpy path", "lstm on dict observations"])
def test_a_replayed_asynchronous_run_gives_its_weights_and_metrics(tmp_path, options):
    experiment_dir = recorded_run(tmp_path, "recorded", **options)
    steps = [json.loads(line) for line in (experiment_dir / "schedule" / "steps.jsonl").read_text().splitlines()]
    assert steps[0]["hyperparams"]["entropy_coef"] != 0.02
    changed = [step["step"] for step in steps if step.get("hyperparams", {}).get("entropy_coef") == 0.02]
    assert len(changed) == 1 and 5 <= changed[0] < len(steps)  # the change took effect between two steps

    verdict = replay_experiment(str(experiment_dir), serial=True, say=lambda line: None)
    kept = run_checkpoint_steps(experiment_dir)
    assert verdict.steps == kept[-1] and verdict.steps >= len(steps) - 2  # the run's last checkpoint
    assert verdict.metrics_differ_at is None, verdict.metrics_differ
    assert verdict.same_as_run is True

    if options:
        return
    earlier = kept[0]
    assert earlier < verdict.steps, kept
    verdict = replay_experiment(str(experiment_dir), until_step=earlier, serial=False, say=lambda line: None)
    assert (verdict.steps, verdict.same_as_run, verdict.metrics_differ_at) == (earlier, True, None)


def test_a_replay_refuses_a_schedule_recorded_elsewhere_and_what_it_cannot_recreate(tmp_path):
    summary = train(run_config(tmp_path, "moved", base=RECORDED_CARTPOLE, train_for_env_steps=20_000))
    experiment_dir = Path(summary["experiment_dir"])
    manifest_path = experiment_dir / "schedule" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["machine"]["packages"]["torch"] = "1.0.0"
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(ConfigError, match=r"torch 1\.0\.0 was recorded, .* is installed"):
        replay_experiment(str(experiment_dir), serial=True, say=lambda line: None)
    with pytest.raises(ConfigError, match="train it with --record-schedule"):
        replay_experiment(str(tmp_path / "nothing"), serial=True, say=lambda line: None)


def test_what_a_replay_cannot_follow_is_refused_before_the_run():
    with pytest.raises(ConfigError) as err:
        Config.from_flat({"record_schedule": True, "inference": "remote", "num_learners": 2}).validate()
    text = str(err.value)
    assert "--record-schedule needs --inference inline" in text and "--record-schedule needs --num-learners 1" in text
    with pytest.raises(ConfigError, match="--record-schedule needs --algo appo"):
        Config.from_flat({"record_schedule": True, "algo": "dqn"}).validate()
    Config.from_flat({"record_schedule": True}).validate()
