"""The runner's side of population-based training (``--pbt``): when to hold a round, and carrying it out.

Every ``--pbt-period-env-steps`` env steps (of the whole run) the runner hands each policy's recent mean return and
hyperparameters to the :class:`~daskrl.pbt_controller.PBTController` component, which decides; for each decision
the target policy's learner imports the source learner's whole training state (weights, Adam state, normalizers)
with the mutated hyperparameters. Both calls run on the learners' own threads between two training steps, so no
training step mixes old and new weights. Each event goes to ``pbt.csv``, the console and the dashboard.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from daskrl.config import Config
from daskrl.errors import ComponentError
from daskrl.fleet import Fleet
from daskrl.monitor.stats import EpisodeWindow
from daskrl.pbt import PBTLog
from daskrl.pbt_controller import PBTController, pbt_setup
from daskrl.policies import PolicyBook
from daskrl.protocol import PBT_TOPIC
from daskrl.runtime.handles import ComponentHandle, spawn

#: seconds a learner may take to export or import a training state (it waits for the training step in progress)
STATE_TIMEOUT_S = 120


class PBTDriver:
    """See the module docstring."""

    def __init__(self, fleet: Fleet, config: Config, book: PolicyBook, env_steps: int, resumed: bool,
                 say: Callable[[str], None], log_event: Callable[[str, dict], None]) -> None:
        self.fleet, self.config, self.book, self.say, self.log_event = fleet, config, book, say, log_event
        self.period = config.policies.pbt_period_env_steps
        self.next_round_at = (env_steps // self.period + 1) * self.period
        self.log = PBTLog(config.experiment_dir)
        self.started = time.monotonic()
        self.exploits: list[dict[str, Any]] = []
        self.controller = self._spawn_controller()
        if not resumed:  # a new population starts spread around the configured values (checkpoints hold them later)
            base = fleet.learner.call("hyperparams")
            initial = self.controller.call("initial_hyperparams", base)
            for policy, learner in enumerate(fleet.policy_learners):
                learner.call("set_hyperparams", initial[policy], timeout=STATE_TIMEOUT_S)

    def _spawn_controller(self) -> ComponentHandle:
        """On policy 0's learner's worker: the controller is idle between rounds, so it needs no worker of its own."""
        setup = pbt_setup(self.config, first_round=self.log.last_round() + 1)
        handle = spawn(self.fleet.client, PBTController, "pbt", run_id=self.fleet.run_id,
                       worker=self.fleet.learner.address, setup=setup)
        handle.call("start")
        return handle

    def poll(self, env_steps: int, elapsed_s: float) -> None:
        """Hold a round when the run has passed the next multiple of the period."""
        if env_steps < self.next_round_at:
            return
        self.next_round_at = (env_steps // self.period + 1) * self.period
        returns = {k: (None if math.isnan(r) else r) for k, r in self.book.mean_returns().items()}
        learners = self.fleet.policy_learners
        hyperparams = {k: h.call("hyperparams", timeout=STATE_TIMEOUT_S) for k, h in enumerate(learners)}
        try:
            decisions = self.controller.call("round", env_steps, returns, hyperparams)
        except ComponentError as exc:  # its worker went with a learner: a new controller numbers rounds on
            self.say(f"daskrl: warning: the PBT controller was lost ({exc}); starting a new one")
            self.controller = self._spawn_controller()
            decisions = self.controller.call("round", env_steps, returns, hyperparams)
        for decision in decisions:
            self._exploit(decision, elapsed_s)

    def _exploit(self, decision: dict[str, Any], elapsed_s: float) -> None:
        learners = self.fleet.policy_learners
        state = learners[decision["source"]].call("export_training_state", timeout=STATE_TIMEOUT_S)
        version = learners[decision["target"]].call("import_training_state", state, decision["after"],
                                                    timeout=STATE_TIMEOUT_S)
        # the target is judged on its new weights from now on: the episodes its old ones played are forgotten
        self.book.episodes[decision["target"]] = EpisodeWindow()
        event = {**decision, "time_s": round(elapsed_s, 3), "target_version": version}
        self.exploits.append(event)
        self.log.write(decision, time_s=elapsed_s)
        self.say(self.log.line(decision))
        self.log_event(PBT_TOPIC, {"run": self.config.run.experiment, **event})

    def close(self) -> None:
        try:
            self.controller.call("stop", timeout=30)
        except ComponentError:
            pass  # lost with its worker: nothing left to stop
