"""A run's summary: what ``train()`` returns and ``RunHandle.wait()`` hands back, from the run's state, its
components' last statistics, its recoveries and departures, and what each observer adds."""

from __future__ import annotations

import math
from typing import Any

from daskrl.monitor.replay_stats import replay_shards
from daskrl.monitor.run_state import EVAL_COLUMNS


def run_summary(run: Any) -> dict[str, Any]:
    """What ``train()`` returns: ``run``'s totals (a :class:`daskrl.driver.loop.live_run.Run`), and what each observer
    adds."""
    state = run.state
    out = {
        "experiment_dir": run.config.experiment_dir,
        "env_steps": state.env_steps,
        "elapsed_s": state.elapsed,
        "fps": state.fps.rate,
        "mean_fps": (state.env_steps - state.env_steps_offset) / max(state.elapsed, 1e-9),
        "episode_return_mean": state.episodes.mean_return,
        "episodes": state.episodes.total,
        "episodes_in_mean": len(state.episodes.returns),
        "policy_version": state.learner.get("policy_version", 0),
        "learner_updates": state.updates,
        "offline": state.counts_updates,  # trained from --dataset alone: no env steps, progress in updates
        "last_evaluation": last_evaluation(run.outputs.rows),
        "max_policy_lag": state.learner.get("max_policy_lag_seen"),  # the oldest sample trained on, in versions
        "train_step_ms": state.learner.get("metrics", {}).get("train_step_ms"),
        "reached_return_at_s": state.reached_return_at,
        "reached_return_mean": state.reached_return_mean,
        "stop_reason": run.control.reason,
        "startup": None,  # a run that started says how (its StartupClock is an observer)
        "time_shares": state.shares,
        **_component_summary(run.ledger.last_stats),
        "recoveries": list(run.care.recovery.recoveries) if run.care.recovery is not None else [],
        "elastic": list(run.care.departures.history) if run.care.departures is not None else [],
        "incidents": dict(state.incidents),
        "data_path": run.data_path(),
        "replay_shards": replay_shards(run.ledger.last_stats),  # off-policy: each shard's numbers (none for appo)
        **({"policies": run.book.summary()} if run.book.num_policies > 1 else {}),
        **run.outputs.dataset.summary(),  # --record-dataset: its id, episodes and steps
    }
    for observer in run.observers:
        for key, value in observer.summary().items():
            out[key] = out[key] + value if isinstance(out.get(key), list) and isinstance(value, list) else value
    return out


def last_evaluation(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest evaluation's columns (--eval-interval-env-steps or --eval-interval-updates), None if none ended."""
    for row in reversed(rows):
        value = row.get("eval_return_mean")
        if isinstance(value, (int, float)) and not math.isnan(value):  # NaN: no evaluation ended before this row
            return {key: row[key] for key in EVAL_COLUMNS if key in row}
    return None


def _component_summary(last_stats: dict[str, dict]) -> dict[str, Any]:
    """Per component: the inference precision samplers resolved, and each learner's worker, device and group."""
    return {
        # what --inference-precision became on each sampler's host (rollout workers with remote inference have
        # no policy of their own and are left out)
        "inference_precision": {name: s["inference_precision"] for name, s in sorted(last_stats.items())
                                if s.get("inference_precision")},
        # each learner's worker, device and group (rank, generation, digests of its weights after recent steps)
        "learners": {name: {"address": s.get("address"), "device": s.get("device"), **s["group"]}
                     for name, s in sorted(last_stats.items()) if "group" in s},
    }
