"""Observation encoders (obs batch -> feature vector), chosen by name (daskrl/models/registry.py).

Encoders are chosen by name so a run config stays plain data; an encoder class
exposes `out_dim` and a `from_spaces(spaces, **kwargs)` constructor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from daskrl.envs.spaces import EnvSpaces
from daskrl.models.registry import _ENCODERS, lookup, register_builtin, register_encoder  # noqa: F401  (old home)

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}


def layer_init(layer: nn.Module, std: float = math.sqrt(2), bias: float = 0.0) -> nn.Module:
    """Orthogonal weights / constant bias, as in CleanRL PPO (stable early updates)."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


class MlpEncoder(nn.Module):
    """Flattens observations (any dtype, cast to float32) through a tanh/relu MLP."""

    def __init__(self, obs_dim: int, hidden: Sequence[int] = (64, 64), activation: str = "tanh") -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"Unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}")
        layers: list[nn.Module] = []
        in_dim = int(obs_dim)
        for h in hidden:
            layers += [layer_init(nn.Linear(in_dim, int(h))), ACTIVATIONS[activation]()]
            in_dim = int(h)
        self.net = nn.Sequential(*layers)
        self.out_dim = in_dim

    @classmethod
    def from_spaces(cls, spaces: EnvSpaces, **kwargs: Any) -> MlpEncoder:
        return cls(spaces.obs_dim, **kwargs)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs.reshape(obs.shape[0], -1).float())


class CnnEncoder(nn.Module):
    """Nature-DQN conv stack on HWC uint8 frames; scaling and the NCHW permute happen inside.

    Doing both here keeps rollout buffers and transfers in compact uint8 HWC.
    """

    def __init__(self, obs_shape: Sequence[int], out_dim: int = 512) -> None:
        super().__init__()
        if len(obs_shape) != 3:
            raise ValueError(f"CnnEncoder needs HWC observations, got shape {tuple(obs_shape)}")
        h, w, c = (int(x) for x in obs_shape)
        self.conv = nn.Sequential(
            layer_init(nn.Conv2d(c, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            conv_dim = self.conv(torch.zeros(1, c, h, w)).shape[1]
        self.fc = nn.Sequential(layer_init(nn.Linear(conv_dim, out_dim)), nn.ReLU())
        self.out_dim = int(out_dim)

    @classmethod
    def from_spaces(cls, spaces: EnvSpaces, **kwargs: Any) -> CnnEncoder:
        return cls(spaces.obs_shape, **kwargs)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        # .float() keeps the HWC memory order, so the in-place scale runs over dense memory (a division allocating
        # a new tensor was 10% of an Atari policy's forward pass)
        x = obs.permute(0, 3, 1, 2).float().mul_(1.0 / 255.0)
        return self.fc(self.conv(x))


register_builtin("encoder", mlp=MlpEncoder, cnn=CnnEncoder)


def resolve_encoder_name(name: str, spaces: EnvSpaces) -> str:
    """'auto' means a CNN for image observations and an MLP otherwise."""
    if name == "auto":
        return "cnn" if spaces.is_image else "mlp"
    lookup("encoder", name)  # an unknown name raises, listing the registered ones
    return name


def make_encoder(name: str, spaces: EnvSpaces, **kwargs: Any) -> nn.Module:
    cls = lookup("encoder", resolve_encoder_name(name, spaces))
    module = getattr(cls, "from_spaces", cls)(spaces, **kwargs)
    if not isinstance(getattr(module, "out_dim", None), int):
        raise ValueError(f"Encoder {name!r} must expose an integer `out_dim` attribute")
    return module
