"""What every algorithm's trainer keeps of one policy, whatever its update: the base of the APPO, DQN and SAC trainers.

The learner components (:mod:`daskrl.learning.learner`, :mod:`daskrl.learning.replay_learner`) read the same
things of any trainer: its model on its device, its learner group (one learner: :class:`SoloGroup`), the mutable
hyperparameters (``hp``, set between steps by PBT and ``run.set``; ``step_hp``, what the step in progress trains
with), the observation statistics, and three counters. Keeping them here means a new algorithm's trainer gets
checkpoints, steering and statistics that behave as the others' do by writing only its update.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from daskrl.algo.common.collectives import Collectives, SoloGroup
from daskrl.algo.common.normalizers import RunningMeanStd
from daskrl.algo.common.plain_torch import PlainTorch
from daskrl.config import INFERENCE_PRECISIONS, hyperparams
from daskrl.devices import cpu_has_native_bfloat16

if TYPE_CHECKING:
    from daskrl.config import AlgoConfig, LearnerConfig, ModelConfig
    from daskrl.models.actor_critic import ActorCritic


@dataclass(frozen=True)
class TrainerOptions:
    """Everything an algorithm's trainer may read when it is built: a learner makes one from its setup and builds
    whichever trainer its algorithm names (``Algorithm.trainer_path``) the same way, without asking which."""

    model: ModelConfig
    learner: LearnerConfig
    algo: AlgoConfig
    total_env_steps: int  # the run's budget (0: none)


def learner_precision(setting: str, model: ActorCritic, device: torch.device) -> str:
    """--learner-precision for ``model`` on ``device``: 'auto' is bfloat16 for an image policy (the Nature CNN or
    IMPALA encoder, where convolutions are nearly all of a step) on a CPU with native bfloat16, float32 otherwise:
    an MLP gains nothing, and a GPU trains in float32 unless asked."""
    if setting not in INFERENCE_PRECISIONS:
        raise ValueError(f"learner precision must be one of {', '.join(INFERENCE_PRECISIONS)}, got {setting!r}")
    if setting != "auto":
        return setting
    image = model.spaces.is_image and model.encoder_name in ("cnn", "impala")
    return "bfloat16" if image and device.type == "cpu" and cpu_has_native_bfloat16() else "float32"


def learner_kernels(setting: str) -> PlainTorch:
    """--learner-kernels: how the trainers compute their updates, the one place it is decided. 'off' is plain torch
    (:class:`PlainTorch`); 'auto' takes each of daskrl/algo/kernels/'s fast paths where it applies, and is the only
    thing that imports them."""
    if setting == "off":
        return PlainTorch()
    if setting == "auto":
        from daskrl.algo.kernels.fast_paths import FastPaths

        return FastPaths()
    raise ValueError(f"learner kernels must be one of auto, off, got {setting!r}")


class PolicyTrainer:
    """The bookkeeping of one policy's trainer (see the module docstring); subclasses add the update."""

    def __init__(self, model: ActorCritic, cfg: LearnerConfig, device: torch.device | None = None) -> None:
        """``model`` is moved to ``device`` (default: the CPU)."""
        self.device = device if device is not None else torch.device("cpu")
        self.model = model.to(self.device)
        self.cfg = cfg
        #: the learner group this trainer belongs to (the learner swaps it when the group is formed again)
        self.group: Collectives = SoloGroup()
        #: this policy's current learning rate, entropy coefficient, clip ratio and gamma (daskrl/config/hyperparams.py):
        #: read from here, not from ``cfg``, which only gives their starting values
        self.hp = hyperparams.from_config(cfg)
        #: the values the step in progress (or the last one) trains with: what ``hp`` was when it began
        self.step_hp = dict(self.hp)
        self.obs_rms = RunningMeanStd(model.obs_norm_shape) if model.normalize_obs else None
        #: the number format the encoders train in (--learner-precision, resolved for this device)
        self.precision = learner_precision(cfg.learner_precision, model, self.device)
        if self.precision == "bfloat16":
            self.model.train_encoders_in_bfloat16()
        #: how the update is computed: plain torch or the fast paths (--learner-kernels); the subclass's optimizers,
        #: steps and gradients come from it
        self.kernels = learner_kernels(cfg.learner_kernels)
        self.train_steps = 0
        self.skipped_steps = 0
        self.samples_trained = 0

    @classmethod
    def from_options(cls, model: ActorCritic, options: TrainerOptions, device: torch.device) -> PolicyTrainer:
        """This algorithm's trainer of ``model``, from what its learner was set up with."""
        raise NotImplementedError(f"{cls.__name__} must say how it is built from TrainerOptions")

    def hyperparams(self) -> dict[str, float]:
        """This policy's current mutable hyperparameters (a copy)."""
        return dict(self.hp)

    def set_hyperparams(self, values: dict[str, float]) -> None:
        """Train with these values from the next step on (any subset of :data:`hyperparams.MUTABLE`; all are
        checked before any is set)."""
        self.hp.update(hyperparams.checked(values))

    # ---- checkpoints: the subclass saves and loads its own parts, this the parts every trainer has ----

    def own_state(self) -> dict[str, Any]:
        """The subclass's part of a checkpoint: its networks, optimizers and anything else only it keeps."""
        raise NotImplementedError

    def load_own_state(self, state: dict[str, Any]) -> None:
        """Load what :meth:`own_state` saved."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {**self.own_state(), "obs_rms": self.obs_rms.state_dict() if self.obs_rms else None,
                "train_steps": self.train_steps, "samples_trained": self.samples_trained,
                "hyperparams": dict(self.hp), "hyperparams_config": hyperparams.from_config(self.cfg)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a checkpoint. Its hyperparameters are checked before anything changes; those whose option
        was changed since win (``--resume --learning-rate 1e-4``: :func:`hyperparams.resumed`)."""
        hp = hyperparams.resumed(state, self.cfg)
        self.load_own_state(state)
        if self.obs_rms is not None and state.get("obs_rms"):
            self.obs_rms.load_state_dict(state["obs_rms"])
            self.model.set_obs_stats(self.obs_rms.mean, self.obs_rms.var, self.obs_rms.count)
        self.train_steps = state.get("train_steps", 0)
        self.samples_trained = state.get("samples_trained", 0)
        self.hp = hp

    def start_afresh(self, fresh: PolicyTrainer) -> None:
        """Go on from ``fresh``'s weights, optimizer and normalizers (a trainer just built as this one was: a league
        exploiter's reset), keeping this trainer's counters and hyperparameters, which the run's statistics, steering
        and budget go on from."""
        self.load_state_dict({**fresh.state_dict(), "train_steps": self.train_steps,
                              "samples_trained": self.samples_trained, "hyperparams": dict(self.hp)})

    def load_model_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """Load a model's weights alone (published ones, or ``--init-checkpoint``'s), refused in one line where they
        do not fit this run's network; the observation statistics go on from the weights' buffers."""
        try:
            missing, unexpected = self.model.load_state_dict(weights, strict=False)
        except RuntimeError as exc:  # shapes that do not fit: one line, not torch's list of every tensor
            raise ValueError(f"these weights do not fit this run's network ({str(exc).splitlines()[-1].strip()})") \
                from exc
        if unexpected or set(missing) - {"obs_count", "return_stats"}:  # statistics older checkpoints lack are fine
            raise ValueError(f"these weights do not fit this run's network (missing {sorted(missing)}, unexpected "
                             f"{sorted(unexpected)})")
        self.obs_stats_from_model()

    def obs_stats_from_model(self) -> None:
        """Continue the observation statistics from the model's buffers (weights loaded without a checkpoint:
        the statistics travel in the published weights)."""
        if self.obs_rms is not None:
            self.obs_rms.load_state_dict({"shape": list(self.obs_rms.shape), "mean": self.model.obs_mean.tolist(),
                                          "var": self.model.obs_var.tolist(), "count": float(self.model.obs_count)})
