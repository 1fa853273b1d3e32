"""The IMPALA ResNet encoder (Espeholt et al. 2018), ``--encoder impala``: the usual image encoder for Procgen and
many Atari results, deeper than the Nature CNN at a similar parameter count.

Three stages, each a 3x3 convolution, a 3x3 max-pool of stride 2 and two residual blocks (relu, conv, relu, conv,
plus the block's input), with 16, 32 and 32 channels; then relu, flatten, a linear layer of 256 units and relu.
Every pool halves the image (rounding up): 84x84 frames end at 11x11, Procgen's 64x64 at 8x8.

Weights keep torch's default initialization, as the reference implementations do: the residual sums are tuned to
it, and orthogonal gains of sqrt(2) on every conv make the activations grow from stage to stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional

from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.models.inputs.frames import FrameConv


class ResidualBlock(nn.Module):
    """relu -> conv 3x3 -> relu -> conv 3x3, added to the input (same channels and size in and out)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # not in place: x is the skip connection
        return x + self.conv1(functional.relu(self.conv0(functional.relu(x))))


class ImpalaStage(nn.Module):
    """conv 3x3 to ``out_channels`` -> max-pool 3x3 stride 2 (padding 1: the size halves, rounding up) -> two
    residual blocks. The first stage's convolution takes the frames (``frames``: uint8 HWC, see FrameConv)."""

    def __init__(self, in_channels: int, out_channels: int, frames: bool = False) -> None:
        super().__init__()
        self.conv = (FrameConv if frames else nn.Conv2d)(in_channels, out_channels, 3, padding=1)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.res0 = ResidualBlock(out_channels)
        self.res1 = ResidualBlock(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.res1(self.res0(self.pool(self.conv(x))))


class ImpalaEncoder(nn.Module):
    """HWC uint8 frames -> ``out_dim`` features; scaling to [0, 1] and the NCHW permute happen inside, as in the
    other image encoders, so rollout buffers stay compact uint8 HWC."""

    def __init__(self, obs_shape: Sequence[int], channels: Sequence[int] = (16, 32, 32), out_dim: int = 256) -> None:
        super().__init__()
        if len(obs_shape) != 3:
            raise ValueError(f"the IMPALA encoder needs HWC image observations, got shape {tuple(obs_shape)}; "
                             "use --encoder mlp (or auto)")
        h, w, c = (int(x) for x in obs_shape)
        stages = []
        for out_c in channels:
            stages.append(ImpalaStage(c, int(out_c), frames=not stages))
            c, h, w = int(out_c), (h + 1) // 2, (w + 1) // 2
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(c * h * w, int(out_dim))
        self.feature_shape = (c, h, w)  # what the last stage leaves of an image (for tests and docs)
        self.out_dim = int(out_dim)

    @classmethod
    def from_spaces(cls, spaces: EnvSpaces, **kwargs: Any) -> ImpalaEncoder:
        return cls(spaces.obs_shape, **kwargs)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = self.stages(obs)
        return functional.relu(self.fc(functional.relu(x).flatten(1)))
