"""The runner's side of population-based training (``--pbt``): when to hold a round, and carrying it out.

Every ``--pbt-period-env-steps`` env steps (of the whole run) the runner hands each policy's recent mean return and
hyperparameters to the :class:`~daskrl.pbt.controller.PBTController` component, which decides; for each decision
the target policy's learner imports the source learner's whole training state (weights, Adam state, normalizers)
with the mutated hyperparameters. Both calls run on the learners' own threads between two training steps, so no
training step mixes old and new weights. Each event goes to ``pbt.csv``, the console and the dashboard.
"""

from __future__ import annotations

import math
from typing import Any

from daskrl.driver.loop.observers import Observer, Run
from daskrl.errors import ComponentError
from daskrl.monitor.stats import EpisodeWindow
from daskrl.pbt.controller import PBTController, pbt_setup
from daskrl.pbt.population import PBTLog
from daskrl.protocol import PBT_TOPIC
from daskrl.runtime.actors.handles import ComponentHandle, spawn

#: seconds a learner may take to export or import a training state (it waits for the training step in progress)
STATE_TIMEOUT_S = 120


class PBTDriver(Observer):
    """See the module docstring: an observer of the run's loop, which holds a round at every period."""

    def __init__(self) -> None:
        self.exploits: list[dict[str, Any]] = []
        self.controller: ComponentHandle | None = None

    def on_start(self, run: Run) -> None:
        self.fleet, self.book, self.config = run.fleet, run.book, run.config
        self.say, self.warn, self.log_event = run.say, run.warn, run.log_event
        self.period = self.config.policies.pbt_period_env_steps
        self.next_round_at = (run.state.env_steps_offset // self.period + 1) * self.period
        self.log = PBTLog(self.config.experiment_dir)
        self.controller = self._spawn_controller()
        if not self.config.run.resume:  # a new population starts spread around the configured values (checkpoints
            base = self.fleet.teams.leaders[0].call("hyperparams")  # hold them later)
            initial = self.controller.call("initial_hyperparams", base)
            for policy, learner in enumerate(self.fleet.teams.leaders):
                learner.call("set_hyperparams", initial[policy], timeout=STATE_TIMEOUT_S)

    def on_poll(self, run: Run) -> None:
        self.poll(run.state.env_steps, run.state.elapsed + run.state.elapsed_offset)

    def on_stop(self, run: Run) -> None:
        self.close()

    def summary(self) -> dict[str, Any]:
        return {"pbt": list(self.exploits)}

    def _spawn_controller(self) -> ComponentHandle:
        """On policy 0's learner's worker: the controller is idle between rounds, so it needs no worker of its own."""
        setup = pbt_setup(self.config, first_round=self.log.last_round() + 1)
        handle = spawn(self.fleet.client, PBTController, "pbt", run_id=self.fleet.roster.run_id,
                       worker=self.fleet.teams.leaders[0].address, setup=setup)
        handle.call("start")
        return handle

    def poll(self, env_steps: int, elapsed_s: float) -> None:
        """Hold a round when the run has passed the next multiple of the period."""
        if env_steps < self.next_round_at:
            return
        self.next_round_at = (env_steps // self.period + 1) * self.period
        returns = {k: (None if math.isnan(r) else r) for k, r in self.book.mean_returns().items()}
        learners = self.fleet.teams.leaders
        hyperparams = {k: h.call("hyperparams", timeout=STATE_TIMEOUT_S) for k, h in enumerate(learners)}
        try:
            decisions = self.controller.call("round", env_steps, returns, hyperparams)
        except ComponentError as exc:  # its worker went with a learner: a new controller numbers rounds on
            self.warn(f"the PBT controller was lost ({exc}); starting a new one")
            self.controller = self._spawn_controller()
            decisions = self.controller.call("round", env_steps, returns, hyperparams)
        for decision in decisions:
            self._exploit(decision, elapsed_s)

    def _exploit(self, decision: dict[str, Any], elapsed_s: float) -> None:
        learners = self.fleet.teams.leaders
        state = learners[decision["source"]].call("export_training_state", timeout=STATE_TIMEOUT_S)
        version = learners[decision["target"]].call("import_training_state", state, decision["after"],
                                                    timeout=STATE_TIMEOUT_S)
        # the target is judged on its new weights from now on: the episodes its old ones played are forgotten
        self.book.episodes[decision["target"]] = EpisodeWindow(self.book.episodes[decision["target"]].size)
        event = {**decision, "time_s": round(elapsed_s, 3), "target_version": version}
        self.exploits.append(event)
        self.log.write(decision, time_s=elapsed_s)
        self.say(self.log.line(decision))
        self.log_event(PBT_TOPIC, {"run": self.config.run.experiment, **event})

    def close(self) -> None:
        if self.controller is None:  # the run stopped before it started
            return
        try:
            self.controller.call("stop", timeout=30)
        except ComponentError:
            pass  # lost with its worker: nothing left to stop
