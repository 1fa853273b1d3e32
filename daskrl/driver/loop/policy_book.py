"""The run's policies as the driver keeps them: each policy's episodes, learner statistics, checkpoints and log rows.

With one policy this is what the runner always kept (``checkpoints/``, the run's rows in ``metrics.csv``). With
``--num-policies N`` each policy has its own checkpoints (``checkpoints/policy_<k>/``, written together at every
checkpoint, so a resume continues every policy from the same moment), its own recent episodes (each episode is
credited to the policy that played it) and one row per report in ``policies.csv`` (a ``policy`` column) and under
``policy_<k>/`` in TensorBoard, next to the run's rows, which stay the run's totals.

With self-play (``--self-play-snapshots K``), or several policies in a multi-agent env, each report also adds one row
per (policy, opponent) pair met since the last report to ``selfplay.csv``: the games a trained policy finished
against it, won (return > 0), drawn (0) and lost (< 0), with the policy version the opponent held (snapshots are
refreshed in turn, so a version is one fixed opponent). An opponent is the policy of the first other agent of the
env (the only other one in a two-player game).
"""

from __future__ import annotations

import math
import os
import time
from typing import TYPE_CHECKING, Any

from daskrl.config import Config
from daskrl.errors import TrainingError
from daskrl.learning.checkpoints import CheckpointStore, checkpoint_dirs
from daskrl.monitor.outputs.csv_log import CsvLog
from daskrl.monitor.stats import EpisodeWindow
from daskrl.sampling.episode import NO_OPPONENT, Episode

if TYPE_CHECKING:
    from daskrl.monitor.outputs.tensorboard_log import TensorBoardLog
    from daskrl.monitor.run_state import RunState

#: the per-policy columns of ``policies.csv`` (and TensorBoard tags under ``policy_<k>/``) taken from the learner
LEARNER_COLUMNS = {"loss": "loss", "entropy": "entropy", "approx_kl": "approx_kl", "learning_rate": "lr",
                   "valid_fraction": "valid_fraction"}


class PolicyBook:
    """See the module docstring."""

    def __init__(self, config: Config, resuming: bool) -> None:
        self.config = config
        self.num_policies = n = config.policies.num_policies
        self.stores = [CheckpointStore(d, keep=config.run.keep_checkpoints)
                       for d in checkpoint_dirs(config.experiment_dir, n)]
        self.episodes = [EpisodeWindow(config.run.stop_window) for _ in range(n)]
        self.learners: list[dict[str, Any]] = [{} for _ in range(n)]  # each policy's newest learner stats
        self.best = [-math.inf] * n
        self.csv = CsvLog(os.path.join(config.experiment_dir, "policies.csv"), append=resuming) if n > 1 else None
        self.resumed_from: dict[str, Any] | None = None  # the checkpoint a resume loaded (resume_states)
        self.self_play = config.policies.self_play_snapshots > 0
        self.tally_games = self.self_play or n > 1  # who beat whom: with opponents that are policies of their own
        # (policy, opponent, snapshot version or -1) since the last report
        self.games: dict[tuple[int, int, int], list[int]] = {}  # ... -> [wins, draws, losses, newest version]
        self.resuming = resuming
        self.self_play_csv: CsvLog | None = None  # selfplay.csv, from the first games counted
        self.self_play_rows: list[dict[str, Any]] = []  # the newest report's
        self.last_saved = time.monotonic()  # when every policy's checkpoint was last written
        self.milestones = 0  # multiples of --keep-checkpoint-every-env-steps passed so far

    # ---- resume ----

    def resume_states(self) -> list[dict] | None:
        """Each policy's checkpoint of the newest moment all of them have, by policy (None: not resuming). A run
        killed while it wrote them may have written one policy's and not the next's: that moment is skipped. What
        was loaded, and any partial write removed, is in :attr:`resumed_from`."""
        if not self.config.run.resume:
            return None
        partial = sum(len(store.remove_partial_writes()) for store in self.stores)
        common = set.intersection(*(set(store.steps()) for store in self.stores))
        if not common:
            raise TrainingError(f"--resume: the policies of {self.config.experiment_dir!r} have no checkpoint of the "
                                "same moment (every policy's is written at each checkpoint): start it anew with "
                                "--overwrite, or from one policy's weights with --init-checkpoint")
        steps = max(common)
        paths = [store.path_of(steps) for store in self.stores]
        states = [store.load(path) for store, path in zip(self.stores, paths, strict=True)]
        for k, state in enumerate(states):
            self.best[k] = float(state.get("best_return", -math.inf))
        self.resumed_from = {"checkpoint": os.path.relpath(paths[0], self.config.experiment_dir),
                             "env_steps": steps, "partial_writes_removed": partial}
        return states

    # ---- what the components report ----

    def trained(self, episodes: list[Episode]) -> list[Episode]:
        """The episodes a trained policy played (not a self-play snapshot's side of a game)."""
        return [e for e in episodes if e.policy < self.num_policies]

    def add_episodes(self, trained: list[Episode]) -> None:
        """Episodes the trained policies played (:meth:`trained` of what rollout workers report), each policy's
        into its window at once."""
        by_policy: dict[int, list[Episode]] = {}
        for episode in trained:
            by_policy.setdefault(episode.policy, []).append(episode)
        for policy, episodes in by_policy.items():
            self.episodes[policy].extend(episodes)
        if self.tally_games:
            for episode in trained:
                if episode.opponent != NO_OPPONENT:
                    self._tally(episode)

    def _tally(self, episode: Episode) -> None:
        """Count a game against another policy. A snapshot is one fixed player per version; a trained opponent
        moves on at every step: one row for all its versions."""
        opponent, version = episode.opponent, episode.opponent_version
        key = (episode.policy, opponent, version if opponent >= self.num_policies else -1)
        result = self.games.setdefault(key, [0, 0, 0, version])
        result[0 if episode.ret > 0 else 1 if episode.ret == 0 else 2] += 1
        result[3] = max(result[3], version)

    def note_learner(self, policy: int, stats: dict[str, Any]) -> None:
        self.learners[policy] = stats

    def mean_returns(self) -> dict[int, float]:
        """Each policy's mean return over its recent episodes (NaN: none finished yet)."""
        return {k: window.mean_return for k, window in enumerate(self.episodes)}

    # ---- rows ----

    def rows(self, time_s: float, env_steps: int) -> list[dict[str, Any]]:
        """One row per policy (several policies only)."""
        if self.num_policies == 1:
            return []
        out = []
        for k, (window, learner) in enumerate(zip(self.episodes, self.learners, strict=True)):
            metrics = learner.get("metrics", {})
            out.append({"time_s": time_s, "env_steps": env_steps, "policy": k,
                        "episode_return_mean": window.mean_return, "episode_length_mean": window.mean_length,
                        "episodes": window.total, "policy_version": learner.get("policy_version", 0),
                        "samples_trained": learner.get("samples_trained", 0),
                        **{column: metrics.get(key, math.nan) for column, key in LEARNER_COLUMNS.items()},
                        **{f"hp/{name}": value for name, value in sorted(learner.get("hyperparams", {}).items())}})
        return out

    def self_play_report(self, time_s: float, env_steps: int, tb_log: TensorBoardLog) -> list[dict[str, Any]]:
        """The self-play rows of this report (see the module docstring), written and returned; the games counted
        start afresh."""
        rows = []
        for (policy, opponent, _), (won, drew, lost, version) in sorted(self.games.items()):
            games = won + drew + lost
            snapshot = opponent - self.num_policies
            rows.append({"time_s": time_s, "env_steps": env_steps, "policy": policy,
                         "opponent": f"snapshot_{snapshot}" if snapshot >= 0 else f"policy_{opponent}",
                         "opponent_version": version, "games": games, "win_rate": won / games,
                         "draw_rate": drew / games, "loss_rate": lost / games})
        self.games = {}
        if rows:
            total = sum(r["games"] for r in rows)
            tb_log.writer.add_scalar("self_play/win_rate", sum(r["win_rate"] * r["games"] for r in rows) / total,
                                     env_steps)
        if rows and self.self_play_csv is None:
            self.self_play_csv = CsvLog(os.path.join(self.config.experiment_dir, "selfplay.csv"), append=self.resuming)
        for row in rows:
            self.self_play_csv.write(row)
        self.self_play_rows = rows
        return rows

    def write(self, rows: list[dict[str, Any]], tb_log: TensorBoardLog) -> None:
        for row in rows:
            if self.csv is not None:
                self.csv.write(row)
            for column, value in row.items():
                if column not in ("time_s", "env_steps", "policy") and isinstance(value, (int, float)) \
                        and not math.isnan(value):
                    tb_log.writer.add_scalar(f"policy_{row['policy']}/{column}", value, int(row["env_steps"]))

    def summary(self) -> list[dict[str, Any]]:
        """Each policy's standing for the run's summary."""
        return [{"policy": k, "episode_return_mean": window.mean_return, "episodes": window.total,
                 "policy_version": learner.get("policy_version", 0),
                 "hyperparams": learner.get("hyperparams", {})}
                for k, (window, learner) in enumerate(zip(self.episodes, self.learners, strict=True))]

    # ---- checkpoints ----

    def checkpoint_meta(self, policy: int, state: RunState) -> dict[str, Any]:
        """What the driver adds to ``policy``'s learner snapshot in its checkpoint (the learner serializes the two
        together: see Learner.checkpoint_bytes); ``best_return`` counts this checkpoint when it is the best."""
        mean, best = self.episodes[policy].mean_return, self._is_best(policy)
        return {"env_steps": state.env_steps, "elapsed_s": state.elapsed + state.elapsed_offset,
                "best_return": mean if best else self.best[policy], "episode_return_mean": mean,
                "policy": policy, "config": self.config.to_json(),
                **({} if state.curriculum is None else {"curriculum": state.curriculum}),
                **({"league": state.league} if state.league is not None and policy == 0 else {})}

    def start_checkpoint_clock(self, env_steps: int) -> None:
        """The run starts (at ``env_steps``, a resumed run's count): the first checkpoint is due an interval from
        now, and milestones count from there."""
        every = self.config.run.keep_checkpoint_every_env_steps
        self.milestones = env_steps // every if every else 0
        self.last_saved = time.monotonic()

    def checkpoint_due(self) -> bool:
        return time.monotonic() - self.last_saved >= self.config.run.checkpoint_interval

    def save_all(self, snapshots: list[bytes], state: RunState) -> None:
        """Every policy's checkpoint of one moment (by policy), kept for good when it passes a milestone of
        --keep-checkpoint-every-env-steps."""
        every = self.config.run.keep_checkpoint_every_env_steps
        milestone = bool(every) and state.env_steps // every > self.milestones
        for policy, snapshot in enumerate(snapshots):
            self.save(policy, snapshot, state, milestone)
        if milestone:
            self.milestones = state.env_steps // every
        self.last_saved = time.monotonic()

    def save(self, policy: int, checkpoint: dict[str, Any] | bytes, state: RunState, milestone: bool) -> None:
        """Write ``policy``'s checkpoint (a snapshot, or a learner's serialized one with :meth:`checkpoint_meta` in
        it), tagged best when its recent mean return is its best so far."""
        mean = self.episodes[policy].mean_return
        best = self._is_best(policy)
        if isinstance(checkpoint, dict):
            checkpoint.update(self.checkpoint_meta(policy, state))
        if best:
            self.best[policy] = mean
        # named by the run's progress: env steps, or an offline run's updates (its env steps stay 0)
        self.stores[policy].save(checkpoint, state.progress, tag_best=best, score=mean if best else None,
                                 milestone=milestone)

    def _is_best(self, policy: int) -> bool:
        window = self.episodes[policy]
        return window.full and window.mean_return > self.best[policy]

    def close(self) -> None:
        for log in (self.csv, self.self_play_csv):
            if log is not None:
                log.close()
