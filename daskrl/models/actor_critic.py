"""The actor-critic network shared by inference (rollout workers) and the learner.

Inference wants numpy in / numpy out with no autograd; the learner wants
log-probs, entropies and values of stored actions; the parameter store wants
plain numpy weights. One module serves all three so they cannot drift apart.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from daskrl.config import Config, ModelConfig
from daskrl.envs.dict_obs import unpack
from daskrl.envs.spaces import EnvSpaces
from daskrl.errors import ConfigError
from daskrl.models.dict_encoder import DictEncoder, unpack_tensors
from daskrl.models.encoders import layer_init, make_encoder, resolve_encoder_name
from daskrl.models.heads import Distribution, make_action_head
from daskrl.models.recurrent import make_core


class ActorCritic(nn.Module):
    """Encoder(s) + action head + value head for one env's `EnvSpaces`.

    With `shared_encoder=None` the default follows CleanRL: separate policy/value
    MLPs for vector observations, one shared CNN trunk for images (the conv stack
    dominates the cost, so sharing halves it).
    """

    def __init__(
        self,
        spaces: EnvSpaces,
        model: ModelConfig | None = None,
        *,
        shared_encoder: bool | None = None,
        encoder_kwargs: dict[str, Any] | None = None,
        init_log_std: float | None = None,
    ) -> None:
        """``model`` holds the encoder name, MLP sizes and activation, and observation normalization (the
        defaults of :class:`~daskrl.config.ModelConfig` when None: one source of defaults)."""
        super().__init__()
        model = model if model is not None else ModelConfig()
        self.spaces = spaces
        # Observation statistics live in the model (as buffers) so they travel with the weights to every
        # rollout and inference worker: the learner updates them, the parameter store publishes them.
        # a Dict observation's float vectors are normalized (one statistic per scalar, concatenated), never images
        # or indices; the statistics' shape is obs_norm_shape
        self.norm_keys = tuple(k for k in spaces.feature_keys if k.kind == "box")
        self.obs_norm_shape = (sum(k.size for k in self.norm_keys),) if spaces.is_dict else tuple(spaces.obs_shape)
        self.normalize_obs = bool(model.normalize_obs) and not spaces.is_image \
            and (not spaces.is_dict or bool(self.norm_keys))
        if self.normalize_obs:
            self.register_buffer("obs_mean", torch.zeros(self.obs_norm_shape))
            self.register_buffer("obs_var", torch.ones(self.obs_norm_shape))
            self.register_buffer("obs_count", torch.zeros((), dtype=torch.float64))
        # The learner's value-target statistics (mean, variance, count) travel with the weights as well: a learner
        # restarted from published weights, before any checkpoint exists, goes on with the scale its value head
        # was trained at (samplers never read them).
        self.register_buffer("return_stats", torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64))
        kwargs = dict(encoder_kwargs or {})
        if spaces.is_dict:
            self.encoder_name = "dict"
            kwargs = {"image_encoder": model.encoder, "key_encoders": dict(model.key_encoders),
                      "hidden": tuple(model.hidden_sizes), "activation": model.activation, **kwargs}
            has_image = any(k.kind == "image" for k in spaces.feature_keys)
        else:
            self.encoder_name = resolve_encoder_name(model.encoder, spaces)
            has_image = self.encoder_name in ("cnn", "small_cnn")
            if self.encoder_name == "mlp":
                kwargs = {"hidden": tuple(model.hidden_sizes), "activation": model.activation, **kwargs}
        # a recurrent model has one encoder and one core for both heads (see daskrl/models/recurrent.py); an image
        # trunk is shared too (the conv stack dominates the cost)
        self.shared_encoder = has_image or model.rnn != "none" if shared_encoder is None else bool(shared_encoder)
        if model.rnn != "none" and not self.shared_encoder:
            raise ValueError("a recurrent core is shared by both heads, so the encoder must be shared too")

        build = (lambda: DictEncoder(spaces, **kwargs)) if spaces.is_dict \
            else (lambda: make_encoder(self.encoder_name, spaces, **kwargs))
        self.encoder = build()
        # None when shared, so the trunk's weights appear once in state_dict.
        self.value_encoder = None if self.shared_encoder else build()
        self.core = make_core(model, spaces, self.encoder.out_dim)
        head_in = self.encoder.out_dim if self.core is None else self.core.out_dim
        self.actor = make_action_head(head_in, spaces, model.init_log_std if init_log_std is None
                                      else init_log_std, model.action_bounds)
        value_in = head_in if self.value_encoder is None else self.value_encoder.out_dim
        self.critic = layer_init(nn.Linear(value_in, 1), std=1.0)

        #: float32 everywhere, unless a sampler switched the encoders with :meth:`use_bfloat16_encoders`
        self.encoder_dtype = torch.float32
        self._action_shape = tuple(spaces.action_shape)
        self._action_dtype = np.dtype(spaces.action_dtype)
        self._flat_actions = spaces.action_kind == "box"

    @property
    def recurrent(self) -> bool:
        return self.core is not None

    @property
    def state_size(self) -> int:
        """Floats of recurrent state per env (0: feed-forward)."""
        return 0 if self.core is None else self.core.state_size

    def forward(self, obs: torch.Tensor) -> tuple[Distribution, torch.Tensor]:
        """obs (batch, *obs_shape) -> (action distribution, value (batch,)); feed-forward models only (a recurrent
        one steps with :meth:`step` and learns with :meth:`evaluate_sequence`)."""
        if self.core is not None:
            raise TypeError("a recurrent model needs its state: use step() or evaluate_sequence()")
        obs, mask = self.prepare(obs)
        features = self._encode(self.encoder, obs)
        value_features = features if self.value_encoder is None else self._encode(self.value_encoder, obs)
        return self.actor(features, mask), self.critic(value_features).squeeze(-1)

    def step(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[Distribution, torch.Tensor, torch.Tensor]:
        """Recurrent models: obs (batch, *obs_shape) and states [batch, S] -> (distribution, value, next states)."""
        obs, mask = self.prepare(obs)
        out, state = self.core.step(self._encode(self.encoder, obs), state)
        return self.actor(out, mask), self.critic(out).squeeze(-1), state

    def evaluate_sequence(self, obs: torch.Tensor, actions: torch.Tensor, state: torch.Tensor,
                          starts: torch.Tensor | None, keep: Any = ()
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[int, torch.Tensor]]:
        """Learner path of a recurrent model: obs [T, B, *obs_shape], actions [T, B, ...] from states [B, S],
        resetting where ``starts`` [T, B] says an episode begins -> (log_prob, entropy, value), each flat [T * B]
        time-major, and the states ``RecurrentCore.sequence`` keeps (``keep``: steps whose entering state is
        wanted)."""
        T, B = obs.shape[:2]
        flat, mask = self.prepare(obs.reshape(T * B, *obs.shape[2:]))
        out, before = self.core.sequence(self._encode(self.encoder, flat).reshape(T, B, -1), state, starts, keep)
        out = out.reshape(T * B, -1)
        dist = self.actor(out, mask)
        actions = actions.reshape(T * B, -1) if self._flat_actions else actions.reshape(T * B, *actions.shape[2:])
        return dist.log_prob(actions), dist.entropy(), self.critic(out).squeeze(-1), before

    def value_step(self, obs: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """Recurrent models: the value of ``obs`` seen from states [batch, S] (bootstrap values)."""
        return self.critic(self.core.step(self._encode(self.encoder, self.prepare(obs)[0]), state)[0]).squeeze(-1)

    def prepare(self, obs: torch.Tensor) -> tuple[torch.Tensor | dict[str, torch.Tensor], torch.Tensor | None]:
        """-> (the encoder's input, the action mask or None). Observations are normalized with the stored statistics
        (clipped to +-5) when enabled; Dict observations (packed records) are unpacked into one tensor per key
        first, and only their float vectors are normalized."""
        if not self.spaces.is_dict:
            if not self.normalize_obs:
                return obs, None
            return ((obs.float() - self.obs_mean) / torch.sqrt(self.obs_var + 1e-8)).clamp_(-5.0, 5.0), None
        fields = unpack_tensors(obs, self.spaces.obs_keys)
        mask = fields.pop(self.spaces.action_mask_key) if self.spaces.action_mask_key else None
        if self.normalize_obs:
            n = obs.shape[0]
            flat = torch.cat([fields[k.name].reshape(n, -1) for k in self.norm_keys], dim=1)
            flat = ((flat - self.obs_mean) / torch.sqrt(self.obs_var + 1e-8)).clamp_(-5.0, 5.0)
            for k, part in zip(self.norm_keys, flat.split([k.size for k in self.norm_keys], dim=1), strict=True):
                fields[k.name] = part.reshape(n, *k.shape)
        return fields, mask

    def obs_for_stats(self, obs: np.ndarray) -> np.ndarray:
        """The part of observations [M, ...] that normalization keeps statistics of ([M, *obs_norm_shape])."""
        if not self.spaces.is_dict:
            return obs
        fields = unpack(obs, self.norm_keys)
        return np.concatenate([fields[k.name].reshape(obs.shape[0], -1) for k in self.norm_keys], axis=1)

    def use_bfloat16_encoders(self) -> None:
        """Samplers only: keep the encoders' weights in bfloat16 and run them under autocast.

        An image policy's conv stack is nearly all of its cost, and CPUs with native bfloat16 (AVX512-BF16, AMX)
        run it about twice as fast. The heads stay float32, so the log-probs and values written for the learner
        are exactly those of the policy that acted. Weights loaded afterwards are rounded to bfloat16.
        """
        self.encoder.to(torch.bfloat16)
        if self.value_encoder is not None:
            self.value_encoder.to(torch.bfloat16)
        self.encoder_dtype = torch.bfloat16

    def _encode(self, encoder: nn.Module, obs: torch.Tensor | dict[str, torch.Tensor]) -> torch.Tensor:
        if self.encoder_dtype == torch.float32:
            return encoder(obs)
        with torch.autocast(self.critic.weight.device.type, dtype=self.encoder_dtype):
            return encoder(obs).float()

    def set_obs_stats(self, mean: Any, var: Any, count: float = 0.0) -> None:
        if self.normalize_obs:
            self.obs_mean.copy_(torch.as_tensor(mean, dtype=torch.float32).reshape(self.obs_mean.shape))
            self.obs_var.copy_(torch.as_tensor(var, dtype=torch.float32).reshape(self.obs_var.shape))
            self.obs_count.fill_(float(count))

    def set_return_stats(self, mean: float, var: float, count: float) -> None:
        self.return_stats.copy_(torch.tensor([mean, var, count], dtype=torch.float64))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """Value only (bootstrap values), skipping the action head."""
        if self.core is not None:
            raise TypeError("a recurrent model needs its state: use value_step()")
        obs, _ = self.prepare(obs)
        features = self._encode(self.encoder if self.value_encoder is None else self.value_encoder, obs)
        return self.critic(features).squeeze(-1)

    def evaluate(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Learner path: (log_prob, entropy, value), each of shape (batch,)."""
        dist, value = self(obs)
        if self._flat_actions:
            actions = actions.reshape(actions.shape[0], -1)
        return dist.log_prob(actions), dist.entropy(), value

    @torch.inference_mode()
    def act(
        self, obs_np: np.ndarray, deterministic: bool = False, state: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rollout path: numpy obs batch -> (actions, log_prob float32, value float32) as numpy.

        The obs array is wrapped without a copy (unless it is read-only); results are
        views of the output tensors. A recurrent model reads its states from ``state`` (float32 [batch, S]) and
        writes the next states there, in place (a sampler's shared memory, say).
        """
        if not obs_np.flags.writeable:
            obs_np = obs_np.copy()  # torch warns on read-only arrays; encoders never write anyway
        device = self.critic.weight.device
        obs = torch.from_numpy(obs_np).to(device, non_blocking=True)
        if self.core is None:
            dist, value = self(obs)
        else:
            if state is None:
                raise TypeError("a recurrent model acts from its state: pass state=")
            dist, value, next_state = self.step(obs, torch.as_tensor(np.asarray(state), device=device))
            state[...] = next_state.cpu().numpy()
        actions = dist.mode() if deterministic else dist.sample()
        log_prob = dist.log_prob(actions)
        actions_np = actions.cpu().numpy().reshape(obs_np.shape[0], *self._action_shape)
        if actions_np.dtype != self._action_dtype:
            actions_np = actions_np.astype(self._action_dtype)
        return actions_np, log_prob.cpu().numpy(), value.cpu().numpy()

    def state_dict_numpy(self) -> dict[str, np.ndarray]:
        """Weights as independent numpy copies (safe to ship while the learner keeps training). From a GPU they
        come in one transfer per dtype (the tensors joined on the device), not one round trip per tensor."""
        state = self.state_dict()
        if all(v.device.type == "cpu" for v in state.values()):
            return {k: v.detach().numpy().copy() for k, v in state.items()}
        out: dict[str, np.ndarray] = {}
        for dtype in {v.dtype for v in state.values()}:
            keys = [k for k, v in state.items() if v.dtype == dtype]
            flat = torch.cat([state[k].detach().reshape(-1) for k in keys]).cpu().numpy()
            offset = 0
            for k in keys:
                n = state[k].numel()
                out[k] = flat[offset:offset + n].reshape(tuple(state[k].shape))
                offset += n
        return {k: out[k] for k in state}

    def load_state_dict_numpy(self, weights: dict[str, np.ndarray]) -> None:
        """Load weights from `state_dict_numpy` output; key or shape mismatches raise."""
        # load_state_dict copies into the parameters, so wrap without copying where torch allows it;
        # read-only arrays (e.g. decoded from network buffers) need torch.tensor's copy.
        tensors = {}
        for k, v in weights.items():
            v = np.asarray(v)
            tensors[k] = torch.from_numpy(v) if v.flags.writeable else torch.tensor(v)
        self.load_state_dict(tensors, strict=True)


def check_model(config: Config, spaces: EnvSpaces) -> None:
    """Build the run's network once in the driver, so a model option that cannot work (an unsuitable encoder, a
    registered core that answers in other shapes) is a :class:`ConfigError` before any component is created, not a
    failure in every worker."""
    try:
        build_model(spaces, config.model, config.run.seed)
    except (ValueError, TypeError) as exc:
        m = config.model
        what = f"--encoder {m.encoder!r}" + (f" with --rnn {m.rnn!r}" if m.rnn != "none" else "")
        shape = [f"{k.name} {k.shape}" for k in spaces.feature_keys] if spaces.is_dict else tuple(spaces.obs_shape)
        raise ConfigError([f"{what} cannot be built for this env's observations {shape}: {exc}"]) from exc


def build_model(spaces: EnvSpaces, model: ModelConfig, seed: int) -> ActorCritic:
    """The one place where the config turns into a network: the learner, the samplers and ``enjoy`` build the same
    one (seeded, so every process starts from the same initial weights)."""
    torch.manual_seed(seed)
    return ActorCritic(spaces, model)
