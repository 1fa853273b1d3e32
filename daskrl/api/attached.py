"""A run started elsewhere on the same cluster (another process, another machine), seen through its scheduler:
``daskrl.attach(name, client)``.

The run registry (:mod:`daskrl.runtime.access.runs`) gives its state, workers and newest numbers; the dashboard's store
gives its report rows. Read-only unless attached with ``control=True``: then ``stop``, ``set`` and ``scale`` are
requests its driver takes at its next beat (a few seconds), as its own handle's are.
"""

from __future__ import annotations

import time
from typing import Any

from daskrl.api.handle import rows_table
from daskrl.config.hyperparams import checked
from daskrl.errors import ClusterAccessError
from daskrl.runtime.access.runs import list_runs, send_command

#: seconds between two looks at the registry while waiting for an attached run to end
WAIT_POLL_S = 1.0


class AttachedRun:
    """See the module docstring."""

    def __init__(self, client: Any, name: str, control: bool = False) -> None:
        self.client, self.name, self.control = client, name, control
        self.record()  # there now, or refused in one line

    def record(self) -> dict[str, Any]:
        """The run's entry in the registry (raises when no live run has that name)."""
        runs = list_runs(self.client)["runs"]
        found = next((r for r in runs if r["name"] == self.name), None)
        if found is None:
            live = ", ".join(sorted(r["name"] for r in runs)) or "none"
            raise ClusterAccessError(f"no run named {self.name!r} is training on this cluster (live runs: {live})")
        return found

    @property
    def done(self) -> bool:
        return not any(r["name"] == self.name for r in list_runs(self.client)["runs"])

    def status(self) -> dict[str, Any]:
        """Its phase, experiment, workers, age and newest numbers (env steps, frames/s, mean return)."""
        r = self.record()
        return {"name": self.name, "phase": r["state"], "experiment": r["experiment"], "workers": r["workers"],
                "age_s": r["age_s"], **r["report"]}

    def metrics(self) -> Any:
        """Its report rows as the scheduler's dashboard keeps them (a long run's oldest rows thinned)."""
        payload = self.client.sync(self.client.scheduler.daskrl_history, run=self.name)
        return rows_table(payload.get("rows", []))

    def wait(self, timeout: float | None = None) -> None:
        """Wait until the run has ended (it left the registry)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.done:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {self.name!r} still trains after {timeout} s")
            time.sleep(WAIT_POLL_S)

    def stop(self) -> None:
        self._send({"op": "stop", "reason": "stopped by an attached handle"})

    def set(self, **hyperparameters: float) -> None:
        self._send({"op": "set", "values": checked(hyperparameters)})

    def scale(self, rollout_workers: int) -> None:
        self._send({"op": "scale", "rollout_workers": int(rollout_workers)})

    def _send(self, command: dict[str, Any]) -> None:
        if not self.control:
            raise PermissionError(f"run {self.name!r} was attached read-only: attach(name, client, control=True) "
                                  "to steer it")
        send_command(self.client, self.name, command)

    def __repr__(self) -> str:
        return f"<AttachedRun {self.name!r}{' (control)' if self.control else ''}>"
