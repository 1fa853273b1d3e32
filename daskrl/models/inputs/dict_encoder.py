"""Encoding Dict observations: unpack the packed records into one tensor per key, encode each, concatenate.

Images go through an image encoder each (``--encoder``: 'auto' picks by size), keys named in ``--key-encoders``
through the encoder named there (any registered one), and all other keys (vectors, one-hot indices, binary flags)
are concatenated into one MLP, as Stable-Baselines3's CombinedExtractor and Sample Factory's default dict encoder
do. The action mask key is never encoded: the action head reads it (daskrl/models/heads.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from daskrl.envs.layouts.dict_obs import ObsKey
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.models.inputs.encoders import MlpEncoder, make_encoder, resolve_encoder_name

_TORCH_DTYPES = {"uint8": torch.uint8, "float32": torch.float32}


def unpack_tensors(records: torch.Tensor, keys: Sequence[ObsKey]) -> dict[str, torch.Tensor]:
    """Records [N, record_size] uint8 -> {key: [N, *shape]} in the key's dtype (uint8 images, float32 the rest)."""
    n = records.shape[0]
    out = {}
    for key in keys:
        field = records[:, key.offset:key.offset + key.nbytes].contiguous().view(_TORCH_DTYPES[key.dtype])
        out[key.name] = field.reshape(n, *key.shape)
    return out


def key_spaces(spaces: EnvSpaces, key: ObsKey) -> EnvSpaces:
    """The EnvSpaces an encoder of one key sees: that key's shape and dtype, the env's actions."""
    return EnvSpaces(obs_shape=key.shape, obs_dtype=key.dtype, action_kind=spaces.action_kind,
                     action_shape=spaces.action_shape, action_dtype=spaces.action_dtype, num_actions=spaces.num_actions,
                     nvec=spaces.nvec, low=spaces.low, high=spaces.high, action_layout=spaces.action_layout)


def mlp_input(key: ObsKey, x: torch.Tensor) -> torch.Tensor:
    """A non-image key as MLP input [N, feature_dim]: indices one-hot, everything else flat floats."""
    n = x.shape[0]
    if key.kind in ("discrete", "multi_discrete"):
        idx = x.reshape(n, -1).long()
        return torch.cat([F.one_hot(idx[:, i].clamp(0, m - 1), m) for i, m in enumerate(key.nvec)], dim=1).float()
    return x.reshape(n, -1).float()


class DictEncoder(nn.Module):
    """Per-key encoders over a dict of tensors (see the module docstring); ``out_dim`` is their total width."""

    def __init__(self, spaces: EnvSpaces, image_encoder: str = "auto", key_encoders: Mapping[str, str] | None = None,
                 hidden: Sequence[int] = (64, 64), activation: str = "tanh") -> None:
        super().__init__()
        key_encoders = dict(key_encoders or {})
        unknown = sorted(set(key_encoders) - {k.name for k in spaces.feature_keys})
        if unknown:
            raise ValueError(f"--key-encoders names {unknown}, which are not encoded keys of these observations "
                             f"({[k.name for k in spaces.feature_keys]})")
        self.own: dict[str, str] = {}  # key -> the name of its own encoder
        encoders: dict[str, nn.Module] = {}
        for key in spaces.feature_keys:
            name = key_encoders.get(key.name) or (image_encoder if key.kind == "image" else None)
            if name is None:
                continue
            sub = key_spaces(spaces, key)
            try:
                encoders[_module_name(key.name)] = make_encoder(resolve_encoder_name(name, sub), sub)
            except ValueError as exc:
                raise ValueError(f"observation key {key.name!r} {key.shape}: {exc}") from exc
            self.own[key.name] = _module_name(key.name)
        self.keyed = nn.ModuleDict(encoders)
        self.mlp_keys = [k for k in spaces.feature_keys if k.name not in self.own]
        width = sum(k.feature_dim for k in self.mlp_keys)
        self.mlp = MlpEncoder(width, hidden, activation) if self.mlp_keys else None
        self.out_dim = sum(e.out_dim for e in self.keyed.values()) + (self.mlp.out_dim if self.mlp else 0)

    @classmethod
    def from_spaces(cls, spaces: EnvSpaces, **kwargs: Any) -> DictEncoder:
        return cls(spaces, **kwargs)

    def forward(self, fields: Mapping[str, torch.Tensor]) -> torch.Tensor:
        parts = [self.keyed[module](fields[name]) for name, module in self.own.items()]
        if self.mlp is not None:
            parts.append(self.mlp(torch.cat([mlp_input(k, fields[k.name]) for k in self.mlp_keys], dim=1)))
        return torch.cat(parts, dim=1)


def _module_name(key: str) -> str:
    """Module names cannot hold dots (nested keys are ``outer/inner``; '/' is fine, '.' is not)."""
    return key.replace(".", "_")
