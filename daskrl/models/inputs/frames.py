"""Image observations as a convolution's input: why a module, the CNN encoders (Nature, small, IMPALA) all take
frames the same way (their first convolution is a FrameConv), and how they do costs an image learner one pass
over every pixel of a minibatch, or more."""

from __future__ import annotations

import torch
from torch import nn

#: frames hold 0-255; encoders see them in [0, 1]
PIXEL_SCALE = 1.0 / 255.0


def frames_as_input(obs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """HWC frames (0-255, uint8) as the NCHW input of a first convolution with ``weight``, unscaled, in the dtype that
    convolution computes in: under autocast its dtype, else the weight's.

    One pass over the frames: the permuted view is channels-last (no transpose) and ``.to`` keeps those strides.
    Every integer 0-255 is exact in bfloat16 as in float32, so the conversion rounds nothing."""
    device = weight.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else weight.dtype
    return obs.permute(0, 3, 1, 2).to(dtype)


class FrameConv(nn.Conv2d):
    """The first convolution of an image encoder: it takes the HWC uint8 frames themselves, and the scaling to [0, 1]
    is folded into its weights (conv(x / 255, w) = conv(x, w / 255)), a few thousand multiplications a call where
    scaling the frames was one more pass over every pixel: 7 million of them in a 256-frame Doom minibatch, longer
    than the conversion itself (bench_learner.py, docs/performance.md). Its parameters are a ``Conv2d``'s, under the
    same names, so checkpoints load either way."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self._conv_forward(frames_as_input(obs, self.weight), self.weight * PIXEL_SCALE, self.bias)
