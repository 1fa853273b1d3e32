"""TensorBoard event files for a run, through :mod:`daskrl.monitor.outputs.tb_events` (the ``tensorboard`` package;
no torch).

Scalars are grouped by prefix so TensorBoard shows them as sections (``perf/``, ``episode/``, ``learner/``,
``health/``, ``time/``, ``eval/``, and a multi-agent run's ``eval/return/<agent>``); docs/metrics.md says what each one
means and when to worry. Evaluation scalars are placed at the env steps of the weights they evaluated
(``eval_env_steps``), not at the report's.

A *mirror* (Weights & Biases: :mod:`daskrl.monitor.outputs.wandb_log`) gets every scalar and text written here, whoever
writes it (this class, each policy's rows, the events of a steered run): the two can never log different series.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from typing import Any, Protocol

# The CSV column -> TensorBoard tag of every scalar we write.
TAGS = {
    "fps": "perf/fps",
    "policy_lag": "perf/policy_lag",
    "episode_return_mean": "episode/return_mean",
    "episode_return_std": "episode/return_std",
    "episode_length_mean": "episode/length_mean",
    "policy_version": "learner/policy_version",
    "learner_updates": "learner/updates",
    "loss": "learner/loss",
    "policy_loss": "learner/policy_loss",
    "value_loss": "learner/value_loss",
    "entropy": "learner/entropy",
    "approx_kl": "learner/approx_kl",
    "clip_fraction": "learner/clip_fraction",
    "grad_norm": "learner/grad_norm",
    "learning_rate": "learner/learning_rate",
    "valid_fraction": "learner/valid_fraction",
    "incidents": "health/incidents",
    "messages_dropped": "health/messages_dropped",
    "eval_return_mean": "eval/return_mean",
    "eval_return_std": "eval/return_std",
    "eval_length_mean": "eval/length_mean",
    "replay_size": "replay/size",
    "replay_added": "replay/added",
    "replay_served": "replay/served",
}


#: the config's sections whose options shape what is learned (the run's and the deployment's say where and for how
#: long it runs, and where its files go)
LEARNING_SECTIONS = ("env", "sampler", "model", "learner", "policies", "algo")
#: in every run's record, given or not: what tells two runs apart in any comparison
ALWAYS = ("env", "algo", "seed", "train_for_env_steps")


def run_hparams(config: Any) -> tuple[dict[str, bool | int | float | str], str]:
    """The run's HParams record and its group: the learning options the user (or a sweep's trial) gave, with
    :data:`ALWAYS`; lists and other values as JSON text. Runs that differ only in their seed share the group, so
    TensorBoard's HParams view puts a configuration's seeds on one row."""
    learning = {f.name for section in LEARNING_SECTIONS for f in dataclasses.fields(getattr(config, section))}
    flat = config.flat()
    names = sorted((config.explicit() & learning) | set(ALWAYS))
    hparams = {n: flat[n] if isinstance(flat[n], (bool, int, float, str)) else json.dumps(flat[n]) for n in names}
    unseeded = json.dumps({n: v for n, v in hparams.items() if n != "seed"}, sort_keys=True)
    return hparams, hashlib.sha256(unseeded.encode()).hexdigest()[:16]


class Mirror(Protocol):
    """Another place for the scalars and texts of a run; :meth:`flush` ends a report."""

    def add_scalar(self, tag: str, value: float, step: int) -> None: ...

    def add_text(self, tag: str, text: str, step: int) -> None: ...

    def flush(self) -> None: ...


class _Tee:
    """TensorBoard's writer, with each scalar and text handed to a mirror too."""

    def __init__(self, writer: Any, mirror: Mirror) -> None:
        self.writer, self.mirror = writer, mirror

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.writer.add_scalar(tag, value, step)
        self.mirror.add_scalar(tag, float(value), int(step))

    def add_text(self, tag: str, text: str, step: int) -> None:
        self.writer.add_text(tag, text, step)
        self.mirror.add_text(tag, text, int(step))

    def flush(self) -> None:
        self.writer.flush()
        self.mirror.flush()

    def close(self) -> None:
        self.writer.close()  # the mirror's end is its owner's to choose (the run, once its videos are all written)


class TensorBoardLog:
    def __init__(self, log_dir: str, mirror: Mirror | None = None, config: Any = None,
                 by_updates: bool = False) -> None:
        """``config``: the run's, whose learning options go to TensorBoard's HParams view (:func:`run_hparams`); a
        mirror has the config already (W&B's run config). ``by_updates``: an offline run, which takes no env steps,
        is drawn over its learner updates."""
        from daskrl.monitor.outputs.tb_events import EventWriter

        self.step_column, self.eval_step_column = ("learner_updates", "eval_updates") if by_updates else \
            ("env_steps", "eval_env_steps")
        writer = EventWriter(log_dir)
        if config is not None:
            writer.add_session_start(*run_hparams(config))
        self.writer = writer if mirror is None else _Tee(writer, mirror)

    def write(self, row: dict[str, Any], shares: dict[str, dict[str, float]] | None = None) -> None:
        step = int(row[self.step_column])
        eval_step = row.get(self.eval_step_column)
        eval_step = int(eval_step) if isinstance(eval_step, (int, float)) and not math.isnan(eval_step) else step
        for column, tag in TAGS.items():
            value = row.get(column)
            if isinstance(value, (int, float)) and not math.isnan(value):
                self.writer.add_scalar(tag, value, eval_step if tag.startswith("eval/") else step)
        for column, value in row.items():  # an env's own episode metrics (--info-keys, episode_extra_stats), and
            # a multi-agent run's evaluation return per agent (eval_return/<agent> -> eval/return/<agent>)
            if not isinstance(value, (int, float)) or math.isnan(value):
                continue
            if column.startswith("info/"):
                self.writer.add_scalar(column, value, step)
            elif column.startswith("eval_return/"):
                self.writer.add_scalar(f"eval/return/{column[len('eval_return/'):]}", value, eval_step)
        for component, parts in (shares or {}).items():
            for activity, share in parts.items():
                self.writer.add_scalar(f"time/{component}/{activity}", share, step)

    def flush(self) -> None:
        """End a report: what was written since the last one reaches the files (and the mirror) now."""
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
