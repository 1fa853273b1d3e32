"""A policy's whole training state (weights, optimizer, normalizers, hyperparameters, policy version) as a value.

PBT copies one policy's state into another policy's learner (:func:`export_state`, :func:`import_state`), and a
learner group's leader hands its state to the members through the group's store (:func:`pack_state`,
:func:`unpack_state`). Either way the state is a copy: it shares no tensor with the live model and optimizer.
"""

from __future__ import annotations

import copy
import io
from typing import Any

import torch

from daskrl.algo.appo.trainer import APPOTrainer
from daskrl.config.hyperparams import checked


def export_state(trainer: APPOTrainer, version: int) -> dict:
    """``trainer``'s state dict and ``version`` (as a checkpoint holds them), every tensor copied to the CPU: the
    copy shares no storage with the live model or optimizer, which go on training."""
    state = _cpu_copy(trainer.state_dict())
    state["policy_version"] = int(version)
    return state


def import_state(trainer: APPOTrainer, state: dict, hyperparams: dict[str, float]) -> None:
    """Load another policy's trainer state (:meth:`APPOTrainer.state_dict`) into ``trainer`` with ``hyperparams``,
    keeping ``trainer``'s own counters. Loaded from a copy: a state handed over without serialization (in-process
    workers) or imported by two policies must not share tensors, or their optimizers would update each other's
    moments. Nothing changes when it fails (a state of another network, a bad hyperparameter)."""
    new_hp = checked(hyperparams)  # before anything changes
    own = (trainer.train_steps, trainer.skipped_steps, trainer.samples_trained)
    backup = _cpu_copy(trainer.state_dict())
    try:
        trainer.load_state_dict(copy.deepcopy(state))
    except Exception:
        trainer.load_state_dict(backup)
        raise
    trainer.train_steps, trainer.skipped_steps, trainer.samples_trained = own
    trainer.set_hyperparams(new_hp)  # over the source's (loaded with its state): names not given keep those


def _cpu_copy(obj: Any) -> Any:
    """``obj`` with every tensor copied to the CPU (dicts, lists and tuples walked; the rest kept)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _cpu_copy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu_copy(v) for v in obj)
    return copy.deepcopy(obj)


def pack_state(obj: dict) -> bytes:
    """A training state as bytes (torch's format: tensors, numbers, lists and dicts)."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def unpack_state(blob: bytes) -> dict:
    return torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
