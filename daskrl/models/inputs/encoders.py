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

from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.models.inputs.activations import ACTIVATIONS
from daskrl.models.inputs.frames import FrameConv
from daskrl.models.inputs.impala import ImpalaEncoder
from daskrl.models.registry import _ENCODERS, lookup, register_builtin, register_encoder  # noqa: F401  (old home)


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

    MIN_SIZE = 36  # its 8x8/4, 4x4/2 and 3x3/1 convolutions leave nothing of a smaller image

    def __init__(self, obs_shape: Sequence[int], out_dim: int = 512) -> None:
        super().__init__()
        if len(obs_shape) != 3:
            raise ValueError(f"CnnEncoder needs HWC observations, got shape {tuple(obs_shape)}")
        h, w, c = (int(x) for x in obs_shape)
        if min(h, w) < self.MIN_SIZE:
            raise ValueError(f"the Nature CNN needs images of at least {self.MIN_SIZE}x{self.MIN_SIZE} pixels, got "
                             f"{h}x{w}; use --encoder small_cnn (or auto, which picks it for small images)")
        self.conv = nn.Sequential(
            layer_init(FrameConv(c, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            conv_dim = self.conv(torch.zeros(1, h, w, c, dtype=torch.uint8)).shape[1]
        self.fc = nn.Sequential(layer_init(nn.Linear(conv_dim, out_dim)), nn.ReLU())
        self.out_dim = int(out_dim)

    @classmethod
    def from_spaces(cls, spaces: EnvSpaces, **kwargs: Any) -> CnnEncoder:
        return cls(spaces.obs_shape, **kwargs)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(obs))


class SmallCnnEncoder(nn.Module):
    """3x3 convolutions for small images (MiniGrid's 7x7 views, Procgen's 64x64 frames), where the Nature CNN's
    large strides leave nothing: each layer halves the image while it is larger than 8 pixels, so a 7x7 grid keeps
    its cells and a 64x64 frame ends at 8x8 before the linear layer."""

    def __init__(self, obs_shape: Sequence[int], channels: Sequence[int] = (16, 32, 32), out_dim: int = 128) -> None:
        super().__init__()
        if len(obs_shape) != 3:
            raise ValueError(f"SmallCnnEncoder needs HWC observations, got shape {tuple(obs_shape)}")
        h, w, c = (int(x) for x in obs_shape)
        if min(h, w) < 3:
            raise ValueError(f"an image encoder needs at least 3x3 pixels, got {h}x{w}; use --encoder mlp")
        layers: list[nn.Module] = []
        for out_c in channels:
            stride = 2 if min(h, w) > 8 else 1
            conv = FrameConv if not layers else nn.Conv2d  # the first takes the frames
            layers += [layer_init(conv(c, int(out_c), 3, stride=stride, padding=1)), nn.ReLU()]
            c, h, w = int(out_c), (h + 1) // stride if stride > 1 else h, (w + 1) // stride if stride > 1 else w
        self.conv = nn.Sequential(*layers, nn.Flatten())
        self.fc = nn.Sequential(layer_init(nn.Linear(c * h * w, out_dim)), nn.ReLU())
        self.out_dim = int(out_dim)

    @classmethod
    def from_spaces(cls, spaces: EnvSpaces, **kwargs: Any) -> SmallCnnEncoder:
        return cls(spaces.obs_shape, **kwargs)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(obs))


register_builtin("encoder", mlp=MlpEncoder, cnn=CnnEncoder, small_cnn=SmallCnnEncoder, impala=ImpalaEncoder)


def resolve_encoder_name(name: str, spaces: EnvSpaces) -> str:
    """'auto' means the Nature CNN for images of at least 36x36 pixels, the small CNN for smaller ones, an MLP for
    everything else (a Dict observation's keys each get their own; see daskrl/models/inputs/dict_encoder.py)."""
    if name == "auto":
        if spaces.is_image:
            return "cnn" if min(spaces.obs_shape[:2]) >= CnnEncoder.MIN_SIZE else "small_cnn"
        return "mlp"
    lookup("encoder", name)  # an unknown name raises, listing the registered ones
    return name


def make_encoder(name: str, spaces: EnvSpaces, **kwargs: Any) -> nn.Module:
    cls = lookup("encoder", resolve_encoder_name(name, spaces))
    module = getattr(cls, "from_spaces", cls)(spaces, **kwargs)
    if not isinstance(getattr(module, "out_dim", None), int):
        raise ValueError(f"Encoder {name!r} must expose an integer `out_dim` attribute")
    return module
