"""Weights & Biases for a run (``--wandb-project``): the series TensorBoard gets, the run's config, its videos.

Why a mirror of TensorBoard's writer (:class:`~daskrl.monitor.outputs.tensorboard_log.TensorBoardLog`) rather than a
second set of calls: every scalar the run writes (its rows, each policy's, the events of a steered run) goes through
that writer, so W&B and TensorBoard show the same series under the same names, and a new series reaches both.

Why every row carries ``env_steps`` and the charts are drawn over it (``define_metric``), leaving W&B's own step to
count rows: W&B drops a row whose step is not above the last one it holds, while a resumed run starts again at its
checkpoint's env steps (below what the run it resumes may have logged before it was killed), and evaluation scalars
belong at the env steps of the weights they evaluated, below the report's.

A resumed run (``--resume``) continues the W&B run of the run it resumes (its id is kept in
``<experiment>/wandb_run_id``), as far as W&B allows: online, one run; offline, a second ``offline-run-*`` folder
with the same id, which ``wandb sync`` uploads after the first. W&B's files live in ``<experiment>/wandb/``. The
``wandb`` package is imported only here, by the runs that log to it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable
from typing import Any

from daskrl.config import Config
from daskrl.errors import ConfigError, one_line
from daskrl.monitor.outputs.video import saved_videos

#: the file in the experiment directory that holds the W&B run's id, for a resumed run
RUN_ID_FILE = "wandb_run_id"
#: the series the training videos are logged under
VIDEO_KEY = "video"
#: the series every row carries, and every other series is drawn over
STEP_KEY = "env_steps"


def check_wandb_installed() -> None:
    """Refuse, before the run starts, a --wandb-project this installation cannot honour (wandb is not imported)."""
    try:
        found = importlib.util.find_spec("wandb") is not None
    except ValueError:  # sys.modules["wandb"] is None: its import is blocked, as good as missing
        found = False
    if not found:
        raise ConfigError(["--wandb-project logs to Weights & Biases, whose wandb package is not installed: "
                           "pip install 'daskrl[wandb]'"])


class WandbLog:
    """A run's W&B run: scalars and texts gathered by env steps and sent at each report's :meth:`flush` (one W&B
    row per env-steps value), with the videos recorded since; :meth:`close` ends the W&B run. A failure to send is
    one warning, and training goes on: W&B is a view of the run."""

    def __init__(self, run: Any, experiment_dir: str, warn: Callable[[str], None]) -> None:
        self.run, self.experiment_dir, self.warn = run, experiment_dir, warn
        self.pending: dict[int, dict[str, Any]] = {}
        self.videos_sent = {path for _, path in saved_videos(experiment_dir)}  # a resumed run's: the earlier run's
        self.warned = False
        self.closed = False

    @classmethod
    def open(cls, config: Config, resuming: bool, warn: Callable[[str], None], quiet: bool = False) -> WandbLog:
        """Start (or, ``resuming``, continue) the W&B run of ``config``'s experiment; raises one readable
        :class:`ConfigError` when W&B refuses (not logged in, an unknown entity), with nothing of W&B left behind
        in a new experiment. ``quiet``: W&B says nothing on the console (``--log-level warning``)."""
        check_wandb_installed()
        import wandb

        r, directory = config.run, config.experiment_dir
        run_id = _saved_run_id(directory) if resuming else None
        wandb_dir = os.path.join(directory, "wandb")
        created = not os.path.exists(wandb_dir)
        try:
            run = wandb.init(project=r.wandb_project, entity=r.wandb_entity or None, name=r.wandb_name or r.experiment,
                             group=r.wandb_group or None, job_type=r.wandb_job_type or None,
                             tags=list(r.wandb_tags) or None, config=config.flat(), dir=directory, id=run_id,
                             resume="allow" if run_id else None, reinit="create_new",
                             # read at each start: wandb's process-wide settings keep the mode of its first run
                             mode=os.environ.get("WANDB_MODE") or None,
                             settings=wandb.Settings(console="off", **({"silent": True} if quiet else {})))
        except Exception as exc:  # wandb's own errors (UsageError, CommError...) have no common base worth naming
            if created:
                shutil.rmtree(wandb_dir, ignore_errors=True)
            raise ConfigError([f"--wandb-project {r.wandb_project!r}: Weights & Biases could not start a run "
                               f"({one_line(exc)}): log in with `wandb login`, check "
                               "--wandb-entity, or set WANDB_MODE=offline to log on this machine only"]) from exc
        run.define_metric(STEP_KEY)
        run.define_metric("*", step_metric=STEP_KEY)
        with open(os.path.join(directory, RUN_ID_FILE), "w") as f:
            f.write(run.id + "\n")
        return cls(run, directory, warn)

    # ---- the mirror of TensorBoard's writer ----

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.pending.setdefault(step, {})[tag] = value

    def add_text(self, tag: str, text: str, step: int) -> None:
        self.pending.setdefault(step, {})[tag] = text

    def flush(self) -> None:
        """Send what was written since the last flush, one W&B row per env-steps value, then the new videos."""
        pending, self.pending = self.pending, {}
        try:
            for step in sorted(pending):
                self.run.log({**pending[step], STEP_KEY: step})
            self._send_videos()
        except Exception as exc:
            self._warn_once(exc)

    def _send_videos(self) -> None:
        import wandb

        for env_steps, path in saved_videos(self.experiment_dir):
            if path not in self.videos_sent:
                self.videos_sent.add(path)
                self.run.log({VIDEO_KEY: wandb.Video(path, format="mp4"), STEP_KEY: env_steps})

    def _warn_once(self, exc: BaseException) -> None:
        if not self.warned:
            self.warned = True
            self.warn(f"Weights & Biases did not take the run's data ({one_line(exc)}); "
                      "training goes on, TensorBoard and metrics.csv have it all")

    def close(self, failed: bool = False) -> None:
        """Send what is left (the last videos included) and end the W&B run, marked failed when the run was
        (``failed``); safe to call twice."""
        if self.closed:
            return
        self.closed = True
        self.flush()
        try:
            self.run.finish(exit_code=1 if failed else 0)
        except Exception as exc:
            self._warn_once(exc)


def _saved_run_id(directory: str) -> str | None:
    """The W&B run id an earlier run of this experiment used, or None (it did not log to W&B)."""
    try:
        with open(os.path.join(directory, RUN_ID_FILE)) as f:
            return f.read().strip() or None
    except FileNotFoundError:
        return None
