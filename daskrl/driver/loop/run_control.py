"""What tells a live run to change or stop from outside its loop: a run handle's requests (:class:`Steering`), the
cluster's run registry (the run's :class:`~daskrl.runtime.access.runs.RunClaim`: each beat tells it the run is alive
and brings back what an attached handle asked), a stop request (Ctrl-C, an observer, a handle), and the stop rules
the run was started with (env steps, learner updates, seconds, a mean return, episodes recorded)."""

from __future__ import annotations

from typing import Any

from daskrl.config import Config
from daskrl.driver.loop.run_outputs import finite
from daskrl.driver.loop.steering import Steering, apply_remote
from daskrl.monitor.run_state import RunState
from daskrl.runtime.access.runs import RunClaim

#: seconds between two signs of life to the cluster's run registry (its lease is far longer)
BEAT_S = 5.0


class RunControl:
    """See the module docstring."""

    def __init__(self, claim: RunClaim) -> None:
        """``claim``: the run's record on the cluster (its workers, its beats)."""
        self.claim = claim
        self.steering = Steering()  # what a run handle asks of the loop (new hyperparameters, scaling)
        self.next_beat = 0.0
        self.requested = ""  # why the run was asked to stop in order (request_stop)
        self.reason = ""  # why it stopped

    def request_stop(self, reason: str) -> None:
        """Stop in order at the next turn of the loop; the first reason given is the one told. Any thread may call
        it."""
        self.requested = self.requested or reason

    def stop_reason(self, config: Config, state: RunState, stop_signals: Any = None) -> str:
        """Why the run stops now (empty: it goes on): a stop rule met, a stop requested, or a signal
        (``stop_signals.requested``: Ctrl-C or SIGTERM)."""
        signalled = getattr(stop_signals, "requested", "")
        return stop_rule_met(config, state) or self.requested or (f"{signalled} received" if signalled else "")

    def beat(self, run: Any, now: float) -> None:
        """Every few seconds, tell the cluster's run registry that ``run`` is alive, with its newest numbers and
        each policy's parameter block (a policy server following the run reads them); take the requests attached
        handles sent through it."""
        if now < self.next_beat:
            return
        self.next_beat = now + BEAT_S
        last = run.outputs.rows[-1] if run.outputs.rows else {}
        report = {k: finite(last).get(k) for k in ("time_s", "env_steps", "fps", "episode_return_mean")}
        try:
            for command in self.claim.beat(run.phase, report, run.fleet.teams.params):
                apply_remote(run, command)
        except Exception as exc:  # the scheduler did not answer this time: the next beat tells it
            run.incidents.note("run-beat-not-sent", exc)


def stop_rule_met(config: Config, state: RunState) -> str:
    """The stop rule ``state`` meets, in words (empty: none)."""
    r = config.run
    if r.train_for_env_steps and state.env_steps >= r.train_for_env_steps:
        return f"reached {state.env_steps:,} env steps (--train-for-env-steps {r.train_for_env_steps:,})"
    if r.train_for_updates and state.updates >= r.train_for_updates:
        return f"reached {state.updates:,} learner updates (--train-for-updates {r.train_for_updates:,})"
    if r.train_for_seconds and state.elapsed >= r.train_for_seconds:
        return f"trained for {state.elapsed:.0f} s (--train-for-seconds {r.train_for_seconds:g})"
    if r.record_episodes and state.recorded_episodes >= r.record_episodes:
        return f"recorded {state.recorded_episodes:,} episodes into {r.record_dataset} (--record-episodes)"
    if state.reached_return_at is not None:
        return (f"mean return {state.reached_return_mean:.1f} over the last {len(state.episodes.returns)} "
                f"episodes reached --stop-at-return {r.stop_at_return:g}")
    return ""
