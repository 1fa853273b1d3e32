"""The observation adapter: how a raw observation batch becomes the encoder's input, chosen once from the spaces.

Why an object: flat (Box) observations and Dict observations (packed records, daskrl/envs/layouts/dict_obs.py) differ at
every step between the batch and the encoder (unpacking, which part is normalized, the action mask, which encoder
reads them), as Stable-Baselines3's CombinedExtractor separates them. One object per kind keeps the model's paths
free of "is it a Dict" and "is it normalized" questions; :func:`observation_adapter` answers them once.

The running statistics are buffers of the model (``obs_mean``, ``obs_var``, ``obs_count``): checkpoint keys that
travel with the weights, which ``.to(device)`` moves and ``load_state_dict`` fills. So an adapter holds no tensor:
it registers them on the model, and reads them from the model it is handed at each call.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np
import torch
from torch import nn

from daskrl.config import ModelConfig
from daskrl.envs.layouts.dict_obs import unpack
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.models.inputs.dict_encoder import DictEncoder, unpack_tensors
from daskrl.models.inputs.encoders import make_encoder, resolve_encoder_name

#: what an adapter gives the encoder: one tensor (flat observations) or one per key (Dict observations)
EncoderInput = torch.Tensor | dict[str, torch.Tensor]


def standardized(x: torch.Tensor, stats: nn.Module) -> torch.Tensor:
    """``x`` with the model's running statistics taken out, clipped to +-5 (as Stable-Baselines3's VecNormalize)."""
    return ((x.float() - stats.obs_mean) / torch.sqrt(stats.obs_var + 1e-8)).clamp_(-5.0, 5.0)


class ObservationAdapter(ABC):
    """The interface of the adapters, and what one that does not normalize does with statistics: nothing."""

    #: True on the adapters that normalize (see :class:`Normalized`)
    normalize_obs = False
    #: the shape of the statistics normalization keeps (what :meth:`stats_part` returns per observation)
    stats_shape: tuple[int, ...]
    #: the encoder's registered name ('dict' for Dict observations), and whether it reads images
    encoder_name: str
    has_image: bool

    @staticmethod
    @abstractmethod
    def normalizable(spaces: EnvSpaces) -> bool:
        """Whether these observations hold anything to normalize."""

    @staticmethod
    @abstractmethod
    def describe(spaces: EnvSpaces) -> str:
        """The observations in an error message."""

    @abstractmethod
    def build_encoder(self) -> nn.Module:
        """A new encoder (the model builds one, or two when the value head has its own)."""

    @abstractmethod
    def encoder_input(self, obs: torch.Tensor, stats: nn.Module) -> tuple[EncoderInput, torch.Tensor | None]:
        """-> (the encoder's input, the action mask or None) of an observation batch; ``stats``: the model whose
        statistics buffers normalize it."""

    @abstractmethod
    def stats_part(self, obs: np.ndarray) -> np.ndarray:
        """The part of observations [M, ...] that normalization keeps statistics of ([M, *stats_shape])."""

    def register_statistics(self, module: nn.Module) -> None:
        """Nothing to keep without normalization (and no statistics keys in the model's state_dict)."""
        return None

    def set_statistics(self, module: nn.Module, mean: Any, var: Any, count: float) -> None:
        """Without normalization there are no statistics to set."""
        return None


class FlatObservations(ObservationAdapter):
    """A Box observation batch is the encoder's input as it is; no action mask. The encoder is the one
    ``--encoder`` names ('auto': by the observation's shape)."""

    def __init__(self, spaces: EnvSpaces, model: ModelConfig, encoder_kwargs: dict[str, Any] | None = None) -> None:
        self.spaces = spaces
        self.stats_shape = tuple(spaces.obs_shape)
        self.encoder_name = resolve_encoder_name(model.encoder, spaces)
        self.has_image = self.encoder_name in ("cnn", "small_cnn", "impala")
        self.encoder_kwargs = dict(encoder_kwargs or {})
        if self.encoder_name == "mlp":
            self.encoder_kwargs = {"hidden": tuple(model.hidden_sizes), "activation": model.activation,
                                   **self.encoder_kwargs}

    @staticmethod
    def normalizable(spaces: EnvSpaces) -> bool:
        """Images are never normalized (their encoders scale pixels themselves)."""
        return not spaces.is_image

    @staticmethod
    def describe(spaces: EnvSpaces) -> str:
        return str(tuple(spaces.obs_shape))

    def build_encoder(self) -> nn.Module:
        return make_encoder(self.encoder_name, self.spaces, **self.encoder_kwargs)

    def encoder_input(self, obs: torch.Tensor, stats: nn.Module) -> tuple[EncoderInput, torch.Tensor | None]:
        return obs, None

    def stats_part(self, obs: np.ndarray) -> np.ndarray:
        return obs


class DictObservations(ObservationAdapter):
    """Packed Dict records, unpacked into one tensor per key for :class:`DictEncoder`; the action mask key is taken
    out for the action head, never encoded. Normalization keeps statistics of the float vectors only (one per
    scalar, the keys concatenated), never of images or indices."""

    def __init__(self, spaces: EnvSpaces, model: ModelConfig, encoder_kwargs: dict[str, Any] | None = None) -> None:
        self.spaces = spaces
        self.norm_keys = tuple(k for k in spaces.feature_keys if k.kind == "box")
        self.stats_shape = (sum(k.size for k in self.norm_keys),)
        self.encoder_name = "dict"
        self.has_image = any(k.kind == "image" for k in spaces.feature_keys)
        self.encoder_kwargs = {"image_encoder": model.encoder, "key_encoders": dict(model.key_encoders),
                               "hidden": tuple(model.hidden_sizes), "activation": model.activation,
                               **(encoder_kwargs or {})}

    @staticmethod
    def normalizable(spaces: EnvSpaces) -> bool:
        """Only float vectors are normalized: records without one have nothing to normalize."""
        return any(k.kind == "box" for k in spaces.feature_keys)

    @staticmethod
    def describe(spaces: EnvSpaces) -> str:
        return str([f"{k.name} {k.shape}" for k in spaces.feature_keys])

    def build_encoder(self) -> nn.Module:
        return DictEncoder(self.spaces, **self.encoder_kwargs)

    def encoder_input(self, obs: torch.Tensor, stats: nn.Module) -> tuple[EncoderInput, torch.Tensor | None]:
        return self.fields_input(unpack_tensors(obs, self.spaces.obs_keys), stats)

    def fields_input(self, fields: dict[str, torch.Tensor], stats: nn.Module) -> tuple[EncoderInput, torch.Tensor | None]:
        """As :meth:`encoder_input`, from one tensor per key in the record's dtypes (what :func:`unpack_tensors`
        gives): an exported policy takes its keys as separate inputs, never a packed record."""
        mask = fields.pop(self.spaces.action_mask_key, None)  # no such field without a mask key
        return self._normalized(fields, stats), mask

    def _normalized(self, fields: dict[str, torch.Tensor], stats: nn.Module) -> dict[str, torch.Tensor]:
        """The fields as the encoder reads them: as they are, unless a subclass normalizes them."""
        return fields

    def stats_part(self, obs: np.ndarray) -> np.ndarray:
        fields = unpack(obs, self.norm_keys)
        return np.concatenate([fields[k.name].reshape(obs.shape[0], -1) for k in self.norm_keys], axis=1)


class Normalized:
    """Mixin of the normalizing adapters: the statistics are the model's buffers, set by the learner."""

    normalize_obs = True
    stats_shape: tuple[int, ...]

    def register_statistics(self, module: nn.Module) -> None:
        """``obs_mean``, ``obs_var`` and ``obs_count`` on the model: they travel with its weights to every sampler."""
        module.register_buffer("obs_mean", torch.zeros(self.stats_shape))
        module.register_buffer("obs_var", torch.ones(self.stats_shape))
        module.register_buffer("obs_count", torch.zeros((), dtype=torch.float64))

    def set_statistics(self, module: nn.Module, mean: Any, var: Any, count: float) -> None:
        module.obs_mean.copy_(torch.as_tensor(mean, dtype=torch.float32).reshape(module.obs_mean.shape))
        module.obs_var.copy_(torch.as_tensor(var, dtype=torch.float32).reshape(module.obs_var.shape))
        module.obs_count.fill_(float(count))


class NormalizedFlatObservations(Normalized, FlatObservations):
    """Flat observations, normalized with the running statistics."""

    def encoder_input(self, obs: torch.Tensor, stats: nn.Module) -> tuple[EncoderInput, torch.Tensor | None]:
        return standardized(obs, stats), None


class NormalizedDictObservations(Normalized, DictObservations):
    """Dict records whose float vectors are normalized together (one concatenation, one split back per key)."""

    def _normalized(self, fields: dict[str, torch.Tensor], stats: nn.Module) -> dict[str, torch.Tensor]:
        n = fields[self.norm_keys[0].name].shape[0]
        flat = standardized(torch.cat([fields[k.name].reshape(n, -1) for k in self.norm_keys], dim=1), stats)
        for k, part in zip(self.norm_keys, flat.split([k.size for k in self.norm_keys], dim=1), strict=True):
            fields[k.name] = part.reshape(n, *k.shape)
        return fields


_NORMALIZED: dict[type[ObservationAdapter], type[ObservationAdapter]] = {
    FlatObservations: NormalizedFlatObservations, DictObservations: NormalizedDictObservations}


def observation_kind(spaces: EnvSpaces) -> type[ObservationAdapter]:
    """The adapter class for these spaces (before any choice of encoder: error messages describe with it)."""
    return DictObservations if spaces.is_dict else FlatObservations


def observation_adapter(spaces: EnvSpaces, model: ModelConfig,
                        encoder_kwargs: dict[str, Any] | None = None) -> ObservationAdapter:
    """The adapter of a model: by the observations' kind, normalized when ``--normalize-obs`` asks and the
    observations hold something to normalize."""
    kind = observation_kind(spaces)
    normalize = bool(model.normalize_obs) and kind.normalizable(spaces)
    return (_NORMALIZED[kind] if normalize else kind)(spaces, model, encoder_kwargs)
