"""Image observations as a convolution's input: why a module, the CNN encoders (Nature, small, IMPALA) all take
frames the same way, and how they do decides a quarter of an image learner's step."""

from __future__ import annotations

import torch


def scaled_frames(obs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """HWC frames (0-255) as the NCHW input in [0, 1] of a first convolution with ``weight``, in the dtype that
    convolution computes in: under autocast its dtype, else the weight's.

    One pass over the frames: the permuted view is channels-last (no transpose), ``.to`` keeps those strides, and the
    scale runs in place in the target dtype (computed in float32 and rounded once, as a float32 scale cast by autocast
    was). Converting to float32 first and letting autocast cast again to bfloat16 took three passes: a quarter of a
    bfloat16 CNN learner's step on Doom frames."""
    device = weight.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else weight.dtype
    return obs.permute(0, 3, 1, 2).to(dtype).mul_(1.0 / 255.0)
