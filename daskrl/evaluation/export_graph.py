"""A trained policy's forward pass as a plain graph of named tensors: what ``daskrl export`` writes to ONNX or
TorchScript (daskrl/evaluation/export.py).

Why a module of its own: inside daskrl a policy reads packed observation records, keeps its observation and return
statistics apart from its weights, and answers with a distribution object. Outside, none of that exists: the graph
takes the env's own observations (one input per kept key of a Dict observation, in the env's dtypes), folds the
statistics in, and answers with tensors only: the deterministic action, the value in reward units, the
distribution's parameters and, for a recurrent policy, its next state. See docs/export.md for the inputs and outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from daskrl.models.actor_critic import ActorCritic
from daskrl.models.heads import Distribution

#: the recurrent state's input and output names (a Dict observation's keys are the other inputs' names)
STATE_IN, STATE_OUT = "rnn_state", "next_rnn_state"
_RECORD_DTYPES = {"uint8": torch.uint8, "float32": torch.float32}


@dataclass(frozen=True)
class Tensor:
    """One input or output of the graph: its name, its shape without the batch dim and its numpy dtype name."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    doc: str

    def describe(self) -> dict[str, Any]:
        """A JSON-friendly line of the graph's description (the batch dim written as 'batch')."""
        return {"name": self.name, "shape": ["batch", *self.shape], "dtype": self.dtype, "doc": self.doc}


def leaf(tree: Mapping[str, Any], name: str) -> Any:
    """A kept key's entry in a Dict observation, or in a Dict space's ``spaces`` (``outer/inner`` reads a nested
    Dict, as daskrl names its keys)."""
    if name in tree:
        return tree[name]
    outer, _, inner = name.partition("/")
    return tree[outer][inner]


def graph_inputs(model: ActorCritic, observation_space: gym.Space) -> tuple[Tensor, ...]:
    """The observation inputs (``obs``, or one per kept key of a Dict observation, the action mask's included, in
    the env's shapes and dtypes) and the recurrent state (``rnn_state``) where the policy has one."""
    spaces = model.spaces
    if spaces.is_dict:
        inputs = [Tensor(k.name, k.shape, np.dtype(leaf(observation_space.spaces, k.name).dtype).name,
                         "the action mask (1: allowed)" if k.name == spaces.action_mask_key else "observation key")
                  for k in spaces.obs_keys]
    else:
        inputs = [Tensor("obs", tuple(spaces.obs_shape), spaces.obs_dtype, "the observation")]
    if model.recurrent:
        inputs.append(Tensor(STATE_IN, (model.state_size,), "float32",
                             "the recurrent state: zeros at an episode's start, then the last call's next_rnn_state"))
    return tuple(inputs)


def _categorical_params(dist: Distribution) -> tuple[torch.Tensor, ...]:
    return (dist.logits,)


def _multi_categorical_params(dist: Distribution) -> tuple[torch.Tensor, ...]:
    return (torch.cat([d.logits for d in dist.dists], dim=-1),)


def _gaussian_params(dist: Distribution) -> tuple[torch.Tensor, ...]:
    return dist.mean, dist.log_std


#: per action kind: the distribution's parameters as tensors, and what each output is
_PARAMS: dict[str, tuple[Callable[[Distribution], tuple[torch.Tensor, ...]], tuple[tuple[str, str], ...]]] = {
    "discrete": (_categorical_params, (("logits", "log-probabilities of the actions (masked ones about -3.4e38)"),)),
    "multi_discrete": (_multi_categorical_params, (("logits", "log-probabilities of each component's actions, "
                                                              "the components one after the other"),)),
    "box": (_gaussian_params, (("mean", "the Gaussian's mean, before clipping or squashing into the action Box "
                                        "(--action-bounds squash_mean: after the squash, in the Box's units)"),
                               ("log_std", "the Gaussian's log standard deviation (squash_mean: in the Box's units)"))),
}


class PolicyGraph(nn.Module):
    """``forward(*inputs)`` -> (action, value, distribution parameters..., [next_rnn_state]), inputs as
    :func:`graph_inputs` lists them. ``value_scale`` (mean, std) takes the value head's output back to reward
    units where the learner normalized its targets."""

    def __init__(self, model: ActorCritic, inputs: tuple[Tensor, ...], value_scale: tuple[float, float]) -> None:
        super().__init__()
        self.model = model.eval().requires_grad_(False)  # inference only: a loaded TorchScript file's outputs too
        self.inputs = inputs
        self.value_mean, self.value_std = float(value_scale[0]), float(value_scale[1])
        spaces = model.spaces
        self.recurrent = model.recurrent
        self.params, described = _PARAMS[spaces.action_kind]
        self.action_shape, self.action_dtype = tuple(spaces.action_shape), getattr(torch, spaces.action_dtype)
        self.read: Callable[[tuple[torch.Tensor, ...]], tuple[Any, torch.Tensor | None]] = (
            self._read_keys if spaces.is_dict else self._read_flat)
        width = {"discrete": spaces.num_actions, "multi_discrete": sum(spaces.nvec or [])}.get(spaces.action_kind,
                                                                                         spaces.action_dim)
        self.outputs = (Tensor("action", self.action_shape, spaces.action_dtype, "the most likely action (the mode)"),
                        Tensor("value", (), "float32", "the value of the observation, in the env's reward units"),
                        *(Tensor(name, (width,), "float32", doc) for name, doc in described))
        if self.recurrent:
            self.outputs += (Tensor(STATE_OUT, (model.state_size,), "float32", "the state for the next step"),)

    def _read_flat(self, inputs: tuple[torch.Tensor, ...]) -> tuple[Any, torch.Tensor | None]:
        return self.model.prepare(inputs[0])

    def _read_keys(self, inputs: tuple[torch.Tensor, ...]) -> tuple[Any, torch.Tensor | None]:
        """The keys in the record's dtypes (float32, uint8 images), as packing them would store them."""
        fields = {k.name: x.to(_RECORD_DTYPES[k.dtype]) for k, x in zip(self.model.spaces.obs_keys, inputs,
                                                                         strict=False)}
        return self.model.observations.fields_input(fields, self.model)

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        encoder_input, mask = self.read(inputs)
        if self.recurrent:
            dist, value, state = self.model.decide_step(encoder_input, mask, inputs[-1])
            after: tuple[torch.Tensor, ...] = (state,)
        else:
            dist, value = self.model.decide(encoder_input, mask)
            after = ()
        action = dist.mode().reshape(value.shape[0], *self.action_shape).to(self.action_dtype)
        return action, value * self.value_std + self.value_mean, *self.params(dist), *after

    def example(self, space: gym.Space, batch: int, seed: int) -> tuple[torch.Tensor, ...]:
        """``batch`` observations drawn from the env's observation space (and random states): inputs to trace and
        check the graph with. Float values are kept within +-10: a Box with unbounded (or float32-max) bounds draws
        values near 1e38, which an unnormalized ReLU network turns into inf and NaN in both graphs alike."""
        space.seed(seed)
        drawn = [space.sample() for _ in range(batch)]
        out = []
        for spec in self.inputs:
            if spec.name == STATE_IN:
                out.append(torch.randn(batch, *spec.shape, generator=torch.Generator().manual_seed(seed)) * 0.5)
                continue
            rows = [leaf(d, spec.name) for d in drawn] if self.model.spaces.is_dict else drawn
            values = np.stack([np.asarray(r, dtype=spec.dtype) for r in rows])
            out.append(torch.from_numpy(np.clip(values, -10, 10) if values.dtype.kind == "f" else values))
        return tuple(out)

