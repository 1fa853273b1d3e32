"""Evaluation episodes and videos while training (``--eval-interval-env-steps``, ``--save-video-every-env-steps``;
an offline run, which takes no env steps, evaluates every ``--eval-interval-updates`` learner updates).

Why in the driver, on a thread: evaluation needs the newest weights, its own envs and a few hundred forward passes
every so often, nothing the sampling graph should carry. A component of its own would hold a Dask worker (and,
on a small machine, a core) for work that is idle nearly all the time; envs inside the rollout workers would slow
sampling by more than their own cost (their episodes would share the sampler's loop) and mix evaluation returns
into the training ones. So the runner, at the first poll past each multiple of the interval, takes one snapshot of
the learner's weights (the same ``checkpoint_state`` call a checkpoint makes: between two training steps, so
consistent) and hands it to a thread, which plays the episodes on an env built for it alone, with a CPU copy of
the policy (one torch thread), while the run goes on; videos are recorded the same way on a second thread, so a
slow video (rendering, encoding) never delays an evaluation. What it costs the run is what its envs and forward
passes cost the machine. The result goes into the next report's row (``eval_return_mean`` ...), stamped with the
env steps and learner updates at which its weights were taken (``eval_env_steps``, ``eval_updates``). One evaluation
runs at a time: when one takes longer than the interval, the multiples that pass meanwhile are skipped, not queued.
A failure (an env that raises) is one warning and an incident, and training goes on. A curriculum's evaluations and
videos play the task it has reached. A multi-agent run's games are
played by :mod:`.multi_agent_eval`: every acting policy's weights are taken, and each agent gets its own mean return.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Callable
from typing import Any

import torch

from daskrl.config import Config
from daskrl.config.algo_options import OFFLINE_ALGOS
from daskrl.driver.loop.observers import Observer, Run
from daskrl.envs import EnvSpaces, make_env
from daskrl.envs.curriculum_env import reached_task
from daskrl.errors import ComponentError
from daskrl.evaluation.episodes import episode_stats, run_episodes
from daskrl.evaluation.multi_agent_eval import RunPolicies, acting_weights, agent_columns, eval_result
from daskrl.evaluation.multi_agent_play import game_group, play_games
from daskrl.models.actor_critic import build_model
from daskrl.monitor.run_state import RunState
from daskrl.runtime.actors.incidents import Incidents

logger = logging.getLogger(__name__)


#: evaluation and video envs get seeds far from the training envs' (env_seed packs those below 2**31)
EVAL_SEED_OFFSET = 7_919


class _Task:
    """One kind of work (evaluating or recording) on a thread of its own: one at a time, at multiples of
    ``every`` steps of the run's progress (env steps, or an offline run's updates), with its own env and its own
    copy of the policy."""

    def __init__(self, kind: str, every: int, progress: int) -> None:
        self.kind, self.every = kind, every
        self.next_at = _next_multiple(progress, every)
        self.thread: threading.Thread | None = None
        self.model = None
        self.env = None
        self.task_level = 0  # a curriculum's task its env plays

    @property
    def busy(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def due(self, progress: int) -> bool:
        return bool(self.every) and progress >= self.next_at and not self.busy


class Evaluator:
    """Runs evaluation episodes and records videos on threads of the driver (see the module docstring)."""

    def __init__(self, config: Config, spaces: EnvSpaces, progress: int, incidents: Incidents,
                 warn: Callable[[str], None]) -> None:
        """``progress``: where the run starts, in its progress unit (a resumed run's env steps, or updates)."""
        r = config.run
        self.config, self.spaces, self.incidents, self.warn = config, spaces, incidents, warn
        self.multi_agent = spaces.num_agents > 1  # games of every acting policy (multi_agent_eval.py)
        # two tasks, so a slow video (rendering, encoding) never delays an evaluation
        self.tasks = [_Task("eval", eval_interval(config), progress),
                      _Task("video", r.save_video_every_env_steps, progress)]
        self.video_dir = os.path.join(config.experiment_dir, "videos")
        self._result: dict[str, Any] | None = None
        self._closing = threading.Event()  # the run is stopping: an evaluation in progress ends at its next step
        self.task_level = 0  # the task a curriculum has reached: evaluations and videos play it

    def poll(self, state: RunState, learners: list) -> None:
        """Hand a finished evaluation to the next row; start the tasks whose multiple has passed. ``learners``: each
        policy's learner (a single-agent run evaluates policy 0)."""
        result, self._result = self._result, None
        if result is not None:
            state.pending_evals.append(result)
        steps = state.progress  # env steps, or an offline run's updates
        due = [task for task in self.tasks if task.due(steps)]
        if not due or not learners or any(learner is None for learner in learners):
            return
        try:
            weights = acting_weights(learners) if self.multi_agent else \
                learners[0].call("checkpoint_state", timeout=120)["model"]
        except ComponentError as exc:  # the learner is being recovered: the next poll tries again
            self.incidents.note("eval-weights-unavailable", exc)
            return
        self.task_level = (state.curriculum or {}).get("level", 0)
        for task in due:
            task.next_at = _next_multiple(steps, task.every)
            task.thread = threading.Thread(target=self._run, args=(task, weights, state.env_steps, state.updates),
                                           name=f"daskrl-{task.kind}", daemon=True)
            task.thread.start()

    def close(self, timeout: float = 60.0) -> None:
        """Stop an evaluation in progress (the run has written its last row: its result could go nowhere) and let a
        video in progress finish (it shows the newest policy), waiting at most ``timeout`` seconds for each."""
        self._closing.set()
        for task in self.tasks:
            if task.thread is not None:
                task.thread.join(timeout)
            if not task.busy:
                self._drop_env(task)

    # ---- on the threads ----

    def _run(self, task: _Task, weights: dict | list[dict], env_steps: int, updates: int) -> None:
        try:
            model = self._policy(task, weights)
            deterministic = self.config.run.eval_deterministic
            if task.kind == "eval" and self.multi_agent:
                games = play_games(self._env(task), model.seats(), self.config.run.eval_episodes,
                                   stop=self._closing.is_set)
                if not self._closing.is_set():
                    self._result = eval_result(games, self.spaces.agent_ids, env_steps)
            elif task.kind == "eval":
                returns, lengths = run_episodes(self._env(task), model, self.config.run.eval_episodes,
                                                deterministic, stop=self._closing.is_set)
                if self._closing.is_set():
                    return
                stats = episode_stats(returns, lengths)
                self._result = {**{f"eval_{k}": v for k, v in stats.items()}, "eval_env_steps": env_steps,
                                "eval_updates": updates}
            else:
                self._record(task, model, env_steps, deterministic)
        except Exception as exc:  # a view of the run: one warning, an incident, and training goes on
            kind = f"{task.kind}-failed"
            first = kind not in self.incidents.snapshot()
            self.incidents.note(kind, exc)
            if first:
                what = "evaluation" if task.kind == "eval" else "video"
                at = f"{updates:,} updates" if self.config.algo.algo in OFFLINE_ALGOS else f"{env_steps:,} env steps"
                self.warn(f"{what} at {at} failed ({type(exc).__name__}: {exc}); "
                          "training goes on")
            logger.info("%s failed", task.kind, exc_info=exc)
            self._drop_env(task)  # built afresh for the next multiple: this one may be in a broken state

    @staticmethod
    def _drop_env(task: _Task) -> None:
        env, task.env = task.env, None
        if env is not None:
            try:
                env.close()
            except Exception as exc:  # it failed already; its close failing too changes nothing
                logger.info("closing a failed %s env: %s", task.kind, exc)

    def _policy(self, task: _Task, weights: dict | list[dict]):
        if task.model is None:
            if not self.config.run.serial:  # the driver's torch serves only these threads (with --serial the
                torch.set_num_threads(1)  # learner computes in this process too: its threads are left alone)
            if self.multi_agent:
                task.model = RunPolicies(self.config, self.spaces, self.config.run.eval_deterministic)
            else:
                task.model = build_model(self.spaces, self.config.model, self.config.run.seed)
        if self.multi_agent:
            task.model.load(weights)
            return task.model
        task.model.load_state_dict({k: torch.as_tensor(v).cpu() for k, v in weights.items()})  # a GPU learner's too
        task.model.eval()
        return task.model

    def _env(self, task: _Task):
        if task.env is not None and task.task_level != self.task_level:  # a curriculum moved on since it was built
            self._drop_env(task)
        if task.env is None:
            e, seed, reached = self.config.env, self.config.run.seed + EVAL_SEED_OFFSET, {"level": self.task_level}
            if self.multi_agent:
                task.env = game_group(e.env, self.spaces, seed + (task.kind == "video"), e.env_kwargs,
                                      "rgb_array" if task.kind == "video" else None)
            elif task.kind == "video":
                from daskrl.monitor.outputs.video import make_render_env

                task.env = reached_task(e, reached, lambda spec: make_render_env(spec, seed=seed + 1,
                                                                                 env_kwargs=e.env_kwargs))
            else:
                task.env = reached_task(e, reached, lambda spec: make_env(spec, seed=seed, env_kwargs=e.env_kwargs))
            task.task_level = self.task_level
        return task.env

    def _record(self, task: _Task, model, env_steps: int, deterministic: bool) -> None:
        from daskrl.monitor.outputs.video import video_fps, write_video

        env, frames = self._env(task), []
        if self.multi_agent:  # one game, every agent by the policy the run's mapping gives it
            play_games(env, model.seats(), 1, frames=frames)
            env = env.envs[0]
        else:
            run_episodes(env, model, 1, deterministic, frames=frames)
        write_video(os.path.join(self.video_dir, f"video_{env_steps}.mp4"), frames, video_fps(env))


def eval_interval(config: Config) -> int:
    """How often the run evaluates, in its progress unit: --eval-interval-updates offline, else
    --eval-interval-env-steps (0: never)."""
    r = config.run
    return r.eval_interval_updates if config.algo.algo in OFFLINE_ALGOS else r.eval_interval_env_steps


def _next_multiple(steps: int, every: int) -> float:
    """The first multiple of ``every`` above ``steps`` (never, when ``every`` is 0)."""
    return (steps // every + 1) * every if every else math.inf


class Evaluation(Observer):
    """The evaluator as an observer of the run's loop: started with the run, polled with it, closed when it stops."""

    def __init__(self) -> None:
        self.evaluator: Evaluator | None = None

    def on_start(self, run: Run) -> None:
        if eval_interval(run.config):
            run.state.pending_evals = []  # the row gets the evaluation columns from the first report on
            if run.spaces.num_agents > 1:
                run.state.eval_agent_columns = agent_columns(run.spaces.agent_ids)
        self.evaluator = Evaluator(run.config, run.spaces, run.state.progress, run.incidents, run.warn)

    def on_poll(self, run: Run) -> None:
        self.evaluator.poll(run.state, run.fleet.teams.leaders)

    def on_stop(self, run: Run) -> None:
        if self.evaluator is not None:
            self.evaluator.close()
