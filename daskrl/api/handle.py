"""A run started from Python (``daskrl.start``): a handle to watch and steer it while its loop trains on a thread.

What a Ray user gets from a live ``Algorithm`` and a Sample Factory user does not get at all: the run's rows so far
(``metrics``), its state (``status``), waiting for it (``wait``), stopping it in order with a final checkpoint
(``stop``), more or fewer rollout workers (``scale``), new hyperparameters between two training steps (``set``), and
evaluation episodes with its newest weights (``evaluate``). Steering goes through the run's own loop
(:mod:`daskrl.driver.loop.steering`), so it never races it. In Jupyter the handle shows itself as a small table with a
link to its dashboard page.
"""

from __future__ import annotations

import html
import math
from typing import Any

from daskrl.config.hyperparams import checked
from daskrl.driver.launch.start import LiveRun
from daskrl.driver.loop.steering import adopt_training_state, scale_rollout, set_hyperparams
from daskrl.evaluation.episodes import evaluate_weights
from daskrl.monitor.dashboard import dashboard_page

#: seconds a request to the run's loop may wait for its answer (a scale-up creates components: seconds)
STEER_TIMEOUT_S = 300.0


def rows_table(rows: list[dict[str, Any]]) -> Any:
    """Report rows as a pandas DataFrame where pandas is installed, else the list of rows itself."""
    try:
        import pandas
    except ImportError:
        return rows
    return pandas.DataFrame(rows)


class RunHandle:
    """See the module docstring. A context manager: leaving the block stops the run (if it still trains)."""

    def __init__(self, live: LiveRun) -> None:
        self._live = live
        self._run = live.run
        self.name = self._run.config.run.experiment
        self.config = self._run.config

    # ---- watching ----

    @property
    def experiment_dir(self) -> str:
        return self.config.experiment_dir

    @property
    def dashboard_link(self) -> str | None:
        return dashboard_page(self._run.client)

    def metrics(self, frame: bool = True) -> Any:
        """The report rows so far (the rows of ``metrics.csv``): a pandas DataFrame where pandas is installed (and
        ``frame``), else a list of dicts."""
        rows = list(self._run.outputs.rows)
        return rows_table(rows) if frame else rows

    def status(self) -> dict[str, Any]:
        """Where the run stands: its phase (starting, running, stopping, finished, failed), env steps, learner
        updates (an offline run's progress), frames/s, recent mean return, its components' counts and workers, and
        why it stopped."""
        run, state = self._run, self._run.state
        fleet = run.fleet
        phase = "failed" if self._live.error is not None else "finished" if self._live.finished.is_set() \
            else run.phase
        return {"name": self.name, "phase": phase, "env_steps": state.env_steps, "learner_updates": state.updates,
                "fps": state.fps.rate, "episode_return_mean": state.episodes.mean_return,
                "episodes": state.episodes.total,
                "elapsed_s": state.elapsed, "policy_version": state.learner.get("policy_version", 0),
                "rollout_workers": len(fleet.samplers.rollout) if fleet else 0,
                "inference_workers": len(fleet.samplers.inference) if fleet else 0,
                "workers": sorted({h.address for h in fleet.components()}) if fleet else [],
                "stop_reason": run.control.reason, "error": str(self._live.error) if self._live.error else None}

    @property
    def done(self) -> bool:
        return self._live.finished.is_set()

    def wait(self, timeout: float | None = None) -> dict[str, Any]:
        """Wait until the run has stopped and returns its summary (what ``daskrl.train`` returns); raises what
        stopped it when it failed, and ``TimeoutError`` when it still trains after ``timeout`` seconds."""
        if not self._live.finished.wait(timeout):
            raise TimeoutError(f"run {self.name!r} still trains after {timeout} s")
        if self._live.error is not None:
            raise self._live.error
        return self._live.summary

    # ---- steering ----

    def stop(self, timeout: float | None = None) -> dict[str, Any]:
        """Stop in order, as Ctrl-C does: a last row, a final checkpoint, the components stopped; returns the
        summary."""
        self._run.request_stop("stopped by its handle")
        return self.wait(timeout)

    def scale(self, rollout_workers: int) -> dict[str, Any]:
        """Grow to (or shrink to) ``rollout_workers`` rollout workers, on workers no other run holds; returns how
        many it has now (fewer than asked where the cluster has no more free workers)."""
        return self._steer(lambda run: scale_rollout(run, int(rollout_workers)))

    def set(self, **hyperparameters: float) -> dict[str, float]:
        """Train with these values from the next training step on (learning_rate, entropy_coef, clip_ratio, gamma
        and the others PBT mutates); every policy takes them, the change is logged as an event. Returns the
        hyperparameters now in force."""
        values = checked(hyperparameters)  # a wrong name or value is refused here, before the run sees it
        return self._steer(lambda run: set_hyperparams(run, values))

    def evaluate(self, episodes: int = 10, deterministic: bool = True) -> dict[str, Any]:
        """Play ``episodes`` with the newest weights on an env of their own, in this process; returns the mean and
        spread of their returns, their mean length and the env steps the weights had trained for."""
        weights, env_steps = self._steer(_newest_weights)
        stats = evaluate_weights(self.config, self._run.spaces, weights, episodes, deterministic)
        return {**stats, "env_steps": env_steps}

    def training_state(self) -> dict[str, Any]:
        """Policy 0's whole training state (weights, optimizer, normalizers, hyperparameters), taken between two
        training steps: for another run's :meth:`adopt` (PBT across runs)."""
        return self._steer(lambda run: run.fleet.teams.leaders[0].call("export_training_state", timeout=120))

    def adopt(self, state: dict[str, Any], source: str = "", **hyperparameters: float) -> int:
        """Train on from another run's :meth:`training_state` with these hyperparameters (its own where left
        out); ``config.json`` and a checkpoint hold them at once, and the change is an event. Returns the policy
        version the loaded weights are published as."""
        values = checked({**state.get("hyperparams", {}), **hyperparameters})
        version = self._steer(lambda run: adopt_training_state(run, state, values, source))
        self.config = self._run.config
        return version

    def _steer(self, fn: Any) -> Any:
        return self._run.control.steering.submit(fn).result(timeout=STEER_TIMEOUT_S)

    # ---- a context manager, and how it shows itself ----

    def __enter__(self) -> RunHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.done:
            self.stop()

    def __repr__(self) -> str:
        s = self.status()
        return (f"<RunHandle {self.name!r} {s['phase']}: {s['env_steps']:,} env steps, return "
                f"{_number(s['episode_return_mean'])}, {s['rollout_workers']} rollout workers>")

    def _repr_html_(self) -> str:
        s = self.status()
        link = self.dashboard_link
        rows = [("run", self.name), ("phase", s["phase"]), ("env steps", f"{s['env_steps']:,}"),
                ("frames/s", f"{s['fps']:,.0f}"), ("mean return", _number(s["episode_return_mean"])),
                ("rollout workers", s["rollout_workers"]), ("experiment", self.experiment_dir)]
        body = "".join(f"<tr><th style='text-align:left'>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>"
                       for k, v in rows)
        dashboard = f"<a href='{html.escape(link)}' target='_blank'>dashboard</a>" if link else ""
        return f"<table>{body}</table>{dashboard}"


def _newest_weights(run: Any) -> tuple[dict, int]:
    """Policy 0's newest weights, taken between two training steps, and the run's env steps then."""
    state = run.fleet.teams.leaders[0].call("checkpoint_state", timeout=120)
    return state["model"], run.state.env_steps


def _number(x: float) -> str:
    return "-" if isinstance(x, float) and math.isnan(x) else f"{x:.1f}"
