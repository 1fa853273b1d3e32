"""Learning: the APPO trainer's safety rules (policy lag, non-finite data) on a real actor-critic, and whole
training runs through ``daskrl.train`` on a real LocalCluster: back-pressure, learning CartPole, resume."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import math
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from daskrl import train
from daskrl.algo.appo.trainer import APPOTrainer, TrajectoryBatch, lag_percentile
from daskrl.config import ConfigError, LearnerConfig, ModelConfig
from daskrl.envs import probe_env
from daskrl.learning.checkpoints import CheckpointStore
from daskrl.models.actor_critic import build_model

from ..helpers import run_config, slow

T, N = 16, 8  # 128 samples: with batch_size 64 and 2 epochs, a training step is 4 minibatch updates
BATCH_SIZE, EPOCHS = 64, 2
UPDATES_PER_STEP = EPOCHS * (T * N // BATCH_SIZE)


@pytest.fixture(scope="module")
def spaces():
    return probe_env("CartPole-v1")


def make_trainer(spaces, **learner) -> APPOTrainer:
    model = build_model(spaces, ModelConfig(), seed=0)  # normalize_obs on, as by default
    cfg = dataclasses.replace(LearnerConfig(), batch_size=BATCH_SIZE, num_epochs=EPOCHS, **learner)
    return APPOTrainer(model, cfg, 0)


def make_batch(spaces, versions, seed: int = 0) -> TrajectoryBatch:
    """CartPole-shaped data; ``versions`` is broadcast to [T, N] (one entry per column = per env)."""
    rng = np.random.default_rng(seed)
    return TrajectoryBatch(
        obs=rng.normal(size=(T + 1, N, *spaces.obs_shape)).astype(np.float32),
        actions=rng.integers(0, 2, size=(T, N)).astype(spaces.action_dtype),
        rewards=np.ones((T, N), np.float32),
        dones=rng.random((T, N)) < 0.05,
        log_probs=np.full((T, N), math.log(0.5), np.float32),
        policy_version=np.broadcast_to(np.asarray(versions, np.int32), (T, N)).copy(),
    )


def parameters(model) -> dict[str, torch.Tensor]:
    return {k: p.detach().clone() for k, p in model.named_parameters()}


def changed(before: dict[str, torch.Tensor], model) -> list[str]:
    return [k for k, p in model.named_parameters() if not torch.equal(before[k], p.detach())]


def assert_all_finite(model) -> None:
    bad = [k for k, v in model.state_dict().items() if not torch.isfinite(v).all()]
    assert not bad, f"non-finite model tensors: {bad}"


# ---- policy lag ----


def test_valid_fraction_counts_only_samples_within_max_policy_lag(spaces):
    trainer = make_trainer(spaces, max_policy_lag=20)
    current = 50
    versions = [50, 45, 30, 29, 10, 0, 50, 31]  # lags 0, 5, 20 (still valid), 21, 40, 50, 0, 19
    metrics = trainer.train(make_batch(spaces, versions), current)
    assert metrics["valid_fraction"] == pytest.approx(5 / 8)
    assert metrics["policy_lag_max"] == 50
    assert metrics["policy_lag_mean"] == pytest.approx(np.mean([current - v for v in versions]))
    assert metrics["updates"] == UPDATES_PER_STEP and metrics["skipped_updates"] == 0


def test_lag_counts_give_the_median_and_95th_percentile_of_every_sample_trained_on(spaces):
    """The learner's statistics keep samples by lag, not a mean: percentiles over the run, and over a window from
    two readings (benchmarks/scale_simulation.py)."""
    trainer = make_trainer(spaces, max_policy_lag=20)
    assert math.isnan(lag_percentile(trainer.lag_counts, 50))  # nothing trained yet
    trainer.train(make_batch(spaces, [50, 45, 30, 29, 10, 0, 50, 31]), 50)  # lags 0, 5, 20, 21, 40, 50, 0, 19
    first = trainer.lag_counts.copy()
    expected = np.zeros(51, np.int64)
    for lag in (0, 5, 20, 21, 40, 50, 0, 19):
        expected[lag] += T  # one column per env: T samples each
    assert np.array_equal(first, expected)
    assert lag_percentile(first, 50) == 19 and lag_percentile(first, 95) == 50
    trainer.train(make_batch(spaces, [60, 60, 60, 60, 60, 60, 59, 58]), 60)  # lags 0 x 6, 1, 2
    window = trainer.lag_counts - np.pad(first, (0, len(trainer.lag_counts) - len(first)))
    assert window.sum() == T * N and lag_percentile(window, 50) == 0 and lag_percentile(window, 95) == 2
    assert lag_percentile(trainer.lag_counts, 50) == 0 and lag_percentile(trainer.lag_counts, 95) == 50


def test_training_step_reports_progress_after_every_minibatch(spaces):
    """The learner beats its heartbeat from this callback: a long step on image batches is not silence."""
    trainer = make_trainer(spaces)
    calls: list[int] = []
    metrics = trainer.train(make_batch(spaces, 0), 0, on_progress=lambda: calls.append(trainer.train_steps))
    assert metrics["updates"] == UPDATES_PER_STEP and len(calls) == UPDATES_PER_STEP
    assert calls == [0] * UPDATES_PER_STEP  # during the step, before it is counted as done


def test_batch_of_only_stale_samples_changes_no_parameter(spaces):
    trainer = make_trainer(spaces, max_policy_lag=20)
    # Train once on fresh data first: the optimizer then has momentum, which would move the weights even on a
    # zero gradient if the trainer still stepped it for a batch with nothing to learn from.
    first = trainer.train(make_batch(spaces, 100, seed=1), 100)
    assert first["updates"] == UPDATES_PER_STEP
    before = parameters(trainer.model)

    metrics = trainer.train(make_batch(spaces, 79, seed=2), 100)  # lag 21 > 20 everywhere

    assert metrics["valid_fraction"] == 0.0
    assert metrics["updates"] == 0 and metrics["skipped_updates"] == 0
    assert all(math.isfinite(v) for v in metrics.values()), metrics
    assert changed(before, trainer.model) == [], "a batch with no trainable sample changed the weights"
    assert_all_finite(trainer.model)

    fresh = trainer.train(make_batch(spaces, 100, seed=3), 100)  # lag 0: this one must train
    assert fresh["valid_fraction"] == 1.0 and fresh["updates"] == UPDATES_PER_STEP
    assert set(changed(before, trainer.model)) == set(before), "a fresh batch left some parameters untouched"
    assert_all_finite(trainer.model)


# ---- non-finite data ----


@pytest.mark.parametrize("field,index,value", [
    ("rewards", (3, 2), np.nan),
    ("rewards", (0, 7), np.inf),
    ("obs", (5, 1, 2), np.nan),  # also feeds the running observation statistics
    ("obs", (T, 4, 0), np.nan),  # the bootstrap observation only
    ("log_probs", (9, 0), np.nan),
])
def test_non_finite_batch_is_skipped_and_changes_nothing(spaces, field, index, value):
    trainer = make_trainer(spaces)
    trainer.train(make_batch(spaces, 1, seed=1), 1)
    weights = {k: v.clone() for k, v in trainer.model.state_dict().items()}  # parameters and obs statistics
    obs_rms = trainer.obs_rms.state_dict()
    returns = trainer.returns.state_dict()
    adam_steps = [float(s["step"]) for s in trainer.optimizer.state_dict()["state"].values()]

    bad = make_batch(spaces, 1, seed=2)
    getattr(bad, field)[index] = value
    metrics = trainer.train(bad, 1)

    assert metrics["updates"] == 0
    assert metrics["skipped_updates"] == UPDATES_PER_STEP
    assert trainer.skipped_steps == UPDATES_PER_STEP
    after = trainer.model.state_dict()
    assert [k for k in weights if not torch.equal(weights[k], after[k])] == []
    assert trainer.obs_rms.state_dict() == obs_rms
    assert trainer.returns.state_dict() == returns
    assert [float(s["step"]) for s in trainer.optimizer.state_dict()["state"].values()] == adam_steps

    # Nothing was poisoned: the next clean batch trains normally.
    clean = trainer.train(make_batch(spaces, 1, seed=3), 1)
    assert clean["updates"] == UPDATES_PER_STEP and clean["skipped_updates"] == 0
    assert math.isfinite(clean["loss"]) and math.isfinite(clean["value_target_mean"])
    assert_all_finite(trainer.model)


# ---- whole runs on a LocalCluster ----


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], [dict(zip(rows[0], r, strict=True)) for r in rows[1:]]


def test_slow_learner_holds_rollout_workers_back(tmp_path):
    envs, rollout, slots_per_split, batch_size, batches = 8, 32, 3, 64, 4
    slot_samples = envs * rollout
    samples_per_batch = batch_size * batches
    assert samples_per_batch == slot_samples  # one slot per batch: trained samples = train steps * a slot
    # 50 epochs of 4 minibatches on every 256 samples: the learner is far slower than one rollout worker. The
    # run stops on env steps (not seconds, which cluster start-up on a loaded machine would eat).
    config = run_config(tmp_path, "slow", num_workers=1, num_envs_per_worker=envs, worker_num_splits=1,
                        rollout=rollout, slots_per_split=slots_per_split, batch_size=batch_size,
                        num_batches_per_epoch=batches, num_epochs=50, train_for_env_steps=3_000,
                        train_for_seconds=90, report_interval=0.5)
    rows = []
    summary = train(config, on_report=rows.append)
    assert summary["stop_reason"].startswith("reached"), summary["stop_reason"]

    # Data sampled ahead of the learner: one batch in training, one queued for it, one held by the batcher while
    # it waits for the learner, and every slot of the worker full (workers x splits x slots_per_split).
    capacity = 3 * samples_per_batch + 1 * 1 * slots_per_split * slot_samples
    ahead = []
    for row in rows:
        trained = (row["policy_version"] - 1) * samples_per_batch  # version 1 is the initial weights
        ahead.append(row["env_steps"] - trained)
    assert max(ahead) <= capacity, list(zip(ahead, rows, strict=True))
    assert max(ahead) > capacity - slot_samples, f"the worker never ran up to the cap: {ahead}"
    assert summary["policy_version"] >= 3
    shares = summary["time_shares"]
    assert shares["rollout_0"]["waiting"] > 0.1, shares  # blocked for free slots
    assert shares["learner"]["train"] > 0.5, shares


@pytest.mark.parametrize("kernels", ["auto", "off"])
def test_learns_cartpole_and_writes_metrics_and_checkpoints(tmp_path, kernels):
    """With the learner's fast paths (--learner-kernels auto) and with plain torch (off) alike."""
    config = run_config(tmp_path, stop_at_return=150, train_for_seconds=110, learner_kernels=kernels)
    reports = []
    t0 = time.monotonic()
    summary = train(config, on_report=reports.append)
    took = time.monotonic() - t0

    assert "stop-at-return" in summary["stop_reason"]
    assert summary["reached_return_mean"] >= 150, summary  # the mean the stop rule read
    assert f"mean return {summary['reached_return_mean']:.1f} over" in summary["stop_reason"]
    # episodes that end while the run stops count in the final mean, which may sit just below the line (149.65
    # after a stop at 150.1, seen once)
    assert summary["episode_return_mean"] >= 0.95 * 150, summary
    assert took < 120

    exp_dir = Path(summary["experiment_dir"])
    assert exp_dir.parent == tmp_path
    header, rows = read_csv(exp_dir / "metrics.csv")
    assert {"time_s", "env_steps", "fps", "episode_return_mean"} <= set(header)
    assert len(rows) == len(reports) >= 1
    assert [int(r["env_steps"]) for r in rows] == [r["env_steps"] for r in reports]
    assert int(rows[-1]["env_steps"]) == summary["env_steps"]
    assert float(rows[-1]["episode_return_mean"]) == pytest.approx(summary["episode_return_mean"], abs=0.01)

    store = CheckpointStore(exp_dir / "checkpoints")
    assert store.latest() is not None
    state = store.load("latest")
    assert state["env_steps"] == summary["env_steps"]
    assert state["policy_version"] >= summary["policy_version"]
    assert store.best() is not None and store.best_info()["score"] >= 150
    # the learner trained as asked: torch's fused Adam kernel under auto, torch.optim's default Adam under off
    assert state["optimizer"]["param_groups"][0]["fused"] is (True if kernels == "auto" else None)


def _checkpoints(store: CheckpointStore) -> list[tuple[int, dict]]:
    out = []
    for path in sorted(store.directory.glob("checkpoint_*.pt")):
        out.append((int(path.stem.split("_")[1]), store.load(path)))
    return out


def _adam_step(state: dict) -> float:
    return max(float(s["step"]) for s in state["optimizer"]["state"].values())


def _snapshot(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_resume_continues_the_run_and_refuses_to_overwrite_it(tmp_path):
    first = train(run_config(tmp_path, "resume", train_for_env_steps=50_000, report_interval=0.5))
    exp_dir = Path(first["experiment_dir"])
    store = CheckpointStore(exp_dir / "checkpoints")
    saved = store.load("latest")
    assert saved["env_steps"] == first["env_steps"] >= 50_000
    assert saved["optimizer"]["state"], "the checkpoint has no optimizer state"
    first_steps, first_version = saved["env_steps"], saved["policy_version"]
    first_adam, first_train_steps = _adam_step(saved), saved["train_steps"]
    _, first_rows = read_csv(exp_dir / "metrics.csv")

    second = train(run_config(tmp_path, "resume", resume=True, train_for_env_steps=80_000,
                              report_interval=0.5, checkpoint_interval=1.0, keep_checkpoints=100))
    assert second["env_steps"] >= 80_000

    header, rows = read_csv(exp_dir / "metrics.csv")
    appended = rows[len(first_rows):]
    assert rows[:len(first_rows)] == first_rows and appended
    assert int(appended[0]["env_steps"]) >= first_steps
    assert float(appended[0]["time_s"]) >= float(first_rows[-1]["time_s"])
    assert int(appended[0]["policy_version"]) > first_version

    later = [(steps, state) for steps, state in _checkpoints(store) if steps > first_steps]
    assert later, "the resumed run wrote no checkpoint"
    assert later[0][1]["policy_version"] > first_version
    assert _adam_step(later[0][1]) >= first_adam
    last = later[-1][1]
    assert last["env_steps"] == second["env_steps"]
    # Adam's step counters went on from the first run's: a fresh optimizer would count only the new updates.
    new_updates = _adam_step(last) - first_adam
    assert 0 < new_updates <= (last["train_steps"] - first_train_steps) * 8  # 2 epochs x 4 minibatches a step
    assert last["samples_trained"] > saved["samples_trained"]

    before = _snapshot(exp_dir)
    with pytest.raises(ConfigError, match="--resume"):
        train(run_config(tmp_path, "resume", train_for_env_steps=90_000))
    assert _snapshot(exp_dir) == before


# ---- time limits are not deaths ----


def learned_values(experiment_dir: Path, limit: int) -> np.ndarray:
    """V(t / limit) for t = 0 .. limit - 1, in reward units, from the run's final checkpoint."""
    from daskrl.evaluation import load_policy

    _, model, _ = load_policy(str(experiment_dir))
    obs = torch.arange(limit, dtype=torch.float32).reshape(-1, 1) / limit
    with torch.no_grad():
        normalized = model.value(obs).double()
    mean, var, _ = model.return_stats.tolist()  # the value head predicts normalized returns
    return (normalized * math.sqrt(var + 1e-8) + mean).numpy()


@pytest.mark.parametrize("bootstrap", [True, False], ids=["bootstrapped", "as-deaths"])
def test_a_value_learned_under_a_time_limit_is_the_infinite_horizon_one(tmp_path, bootstrap):
    """Reward 1 forever, cut every 20 steps: the right value is 1 / (1 - gamma) = 10 everywhere. Treating the cut as
    a death (what `dones = terminated | truncated` alone did) learns a value that falls to 1 at the last step."""
    limit, gamma = 20, 0.9
    summary = train(run_config(tmp_path, f"limit_{bootstrap}", env="daskrl.testing.environments.envs:constant_reward",
                               env_kwargs={"limit": limit}, gamma=gamma, num_workers=1, num_envs_per_worker=16,
                               rollout=16, batch_size=256, num_batches_per_epoch=4, learning_rate=3e-3,
                               train_for_env_steps=120_000, bootstrap_time_limits=bootstrap))
    assert summary["episodes"] > 1000 and summary["episode_return_mean"] == limit
    values = learned_values(Path(summary["experiment_dir"]), limit)
    print(f"\nbootstrap={bootstrap}: V at t = 0, 10, 19: {values[0]:.2f}, {values[10]:.2f}, {values[-1]:.2f}")
    expected = 1 / (1 - gamma)
    if bootstrap:
        np.testing.assert_allclose(values, expected, rtol=0.15)
    else:  # the finite-horizon value: 1 at the last step
        assert values[-1] < 2.0 and values[0] > 8.0, values


def test_rewards_are_scaled_then_clipped_for_training_only(spaces):
    trainer = make_trainer(spaces, reward_scale=0.5, reward_clip=1.0)
    shaped = trainer.shape_rewards(torch.tensor([[-6.0, -1.0, 0.5, 3.0]]))
    torch.testing.assert_close(shaped, torch.tensor([[-1.0, -0.5, 0.25, 1.0]]))
    assert make_trainer(spaces).shape_rewards(torch.tensor([7.0])).item() == 7.0  # the defaults change nothing


def test_an_envs_info_metrics_reach_the_csv(tmp_path):
    """info['episode_extra_stats'] at an episode's end, and --info-keys, averaged per report into info/<key>."""
    summary = train(run_config(tmp_path, "info", env="daskrl.testing.environments.envs:info_reporting",
                               env_kwargs={"limit": 10}, info_keys=["distance", "absent"], num_workers=1,
                               num_envs_per_worker=4, rollout=10, batch_size=40, num_batches_per_epoch=1,
                               train_for_env_steps=20_000, report_interval=0.5))
    header, rows = read_csv(Path(summary["experiment_dir"]) / "metrics.csv")
    assert "info/distance" in header and "info/episode" in header and "info/absent" not in header, header
    distances = {float(r["info/distance"]) for r in rows if r["info/distance"]}
    assert distances == {1.0}, distances  # an episode of 10 steps ends at t = 10: distance 10 / 10
    episodes = [float(r["info/episode"]) for r in rows if r["info/episode"]]
    most = summary["env_steps"] / 4 / 10 + 1  # each of the 4 envs counts its own episodes of 10 steps
    assert episodes == sorted(episodes) and 1.0 < episodes[-1] <= most, (episodes, most)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(Path(summary["experiment_dir"]) / "tensorboard"))
    events.Reload()
    assert {"info/distance", "info/episode"} <= set(events.Tags()["scalars"])


@pytest.mark.parametrize("inference", ["inline", pytest.param("remote", marks=slow("a run with inference workers"))])
def test_sync_never_trains_on_a_sample_older_than_the_training_policy(tmp_path, inference):
    summary = train(run_config(tmp_path, f"sync_{inference}", sync=True, inference=inference,
                               num_workers=2, num_envs_per_worker=8, rollout=32, slots_per_split=2,
                               batch_size=256, train_for_env_steps=16_000, report_interval=0.5))
    header, rows = read_csv(Path(summary["experiment_dir"]) / "metrics.csv")
    # a report whose window held no training step (a loaded machine) has no lag: nan, not a lag to check
    lags = [float(r["policy_lag"]) for r in rows if r["policy_lag"] not in ("", "nan")]
    assert summary["policy_version"] >= 10 and lags, (summary["policy_version"], lags)
    assert summary["max_policy_lag"] == 0 and set(lags) == {0.0}, (summary["max_policy_lag"], lags)
    # asynchronous, the same settings train on older samples: the check above can fail
    asynchronous = train(run_config(tmp_path, f"async_{inference}", inference=inference, num_workers=2,
                                    num_envs_per_worker=8, rollout=32, slots_per_split=2, batch_size=256,
                                    train_for_env_steps=16_000))
    assert asynchronous["max_policy_lag"] > 0


def test_init_checkpoint_starts_a_new_experiment_from_the_given_weights(tmp_path):
    teacher = train(run_config(tmp_path, "teacher", train_for_env_steps=30_000))
    taught = CheckpointStore(Path(teacher["experiment_dir"]) / "checkpoints").load("latest")
    # a training step of 524,288 samples (seconds of sampling) does not come within the student's budget, however far
    # sampling overshoots it before the first poll (65,536 was reached at times): it ends with the weights it got
    student = train(run_config(tmp_path, "student", init_checkpoint=teacher["experiment_dir"],
                               batch_size=8192, num_batches_per_epoch=64, train_for_env_steps=2_000))
    state = CheckpointStore(Path(student["experiment_dir"]) / "checkpoints").load("latest")
    assert state["train_steps"] == 0 and state["policy_version"] == 1
    assert set(state["model"]) == set(taught["model"])
    for key, value in taught["model"].items():
        torch.testing.assert_close(state["model"][key], value, msg=key)
    assert state["obs_rms"]["count"] == taught["obs_rms"]["count"] > 0  # the statistics came along
    assert not state["optimizer"]["state"], "the optimizer starts afresh"


@slow("a 150k-step run")
def test_milestone_checkpoints_outlive_pruning(tmp_path):
    summary = train(run_config(tmp_path, "milestones", keep_checkpoint_every_env_steps=50_000,
                               checkpoint_interval=0.3, keep_checkpoints=1, train_for_env_steps=400_000,
                               report_interval=0.3))
    store = CheckpointStore(Path(summary["experiment_dir"]) / "checkpoints")
    steps = [int(p.stem.split("_")[1]) for p in store.milestones()]
    assert len(list(store.directory.glob("checkpoint_*.pt"))) <= 2  # the newest (and the best) only
    buckets = [s // 50_000 for s in steps]
    assert len(steps) >= 3 and buckets == sorted(set(buckets)) and buckets[0] >= 1, steps  # one per multiple passed
    assert all(store.load(p)["env_steps"] == s for p, s in zip(store.milestones(), steps, strict=True))
