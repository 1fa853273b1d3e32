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
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.errors import ConfigError
from daskrl.models.heads import Distribution, make_action_head
from daskrl.models.inputs.encoders import layer_init
from daskrl.models.inputs.frames import FrameConv
from daskrl.models.inputs.observations import EncoderInput, observation_adapter, observation_kind
from daskrl.models.recurrent import make_core


class ActorCritic(nn.Module):
    """Encoder(s) + core + action head + value head for one env's `EnvSpaces`.

    Two objects chosen once shape every path: the observation adapter (``self.observations``: flat or Dict
    observations, normalized or not; daskrl/models/inputs/observations.py) and the core (``self.core``: the feed-forward
    identity or a recurrent core; daskrl/models/recurrent.py). With `shared_encoder=None` ``--value-encoder``
    decides, and its 'auto' follows CleanRL: separate policy/value MLPs for vector observations, one shared CNN trunk
    for images (the conv stack dominates the cost, so sharing halves it).
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
        self.observations = observation_adapter(spaces, model, encoder_kwargs)
        self.normalize_obs = self.observations.normalize_obs
        self.obs_norm_shape = self.observations.stats_shape
        # Observation statistics live in the model (as buffers) so they travel with the weights to every rollout
        # and inference worker: the learner updates them, the parameter store publishes them.
        self.observations.register_statistics(self)
        # The learner's value-target statistics (mean, variance, count) travel with the weights as well: a learner
        # restarted from published weights, before any checkpoint exists, goes on with the scale its value head
        # was trained at (samplers never read them).
        self.register_buffer("return_stats", torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64))
        self.encoder_name = self.observations.encoder_name
        self.shared_encoder = _shares_encoder(model, self.observations.has_image, shared_encoder)
        self._build_encoders()
        self.core = make_core(model, spaces, self.encoder.out_dim)
        # both heads read the core's width: a separate value encoder is built as the policy's, so it is the same
        self.actor = make_action_head(self.core.out_dim, spaces, model.init_log_std if init_log_std is None
                                      else init_log_std, model.action_bounds, model.gaussian_std)
        self.critic = layer_init(nn.Linear(self.core.out_dim, 1), std=1.0)

        #: float32 everywhere, unless a sampler switched the encoders with :meth:`use_bfloat16_encoders`
        self.encoder_dtype = torch.float32
        #: the dtype the encoders run in under autocast (None: as their weights are); a sampler's bfloat16 encoders,
        #: or a learner's float32 encoders trained in bfloat16 (:meth:`train_encoders_in_bfloat16`)
        self.encoder_autocast: torch.dtype | None = None
        self._action_shape = tuple(spaces.action_shape)
        self._action_dtype = np.dtype(spaces.action_dtype)
        self._flat_actions = spaces.action_kind in ("box", "composite")  # one flat row per action

    def _build_encoders(self) -> None:
        """``encoder``, and ``value_encoder`` (None when shared, so the trunk's weights appear once in state_dict).
        ``encoders`` lists those that run, the value head reading the last one's features."""
        self.encoder = self.observations.build_encoder()
        if self.shared_encoder:
            self.value_encoder = None
            self.encoders: tuple[nn.Module, ...] = (self.encoder,)
        else:
            self.value_encoder = self.observations.build_encoder()
            self.encoders = (self.encoder, self.value_encoder)

    @property
    def recurrent(self) -> bool:
        return self.core.state_size > 0

    @property
    def state_size(self) -> int:
        """Floats of recurrent state per env (0: feed-forward)."""
        return self.core.state_size

    def forward(self, obs: torch.Tensor) -> tuple[Distribution, torch.Tensor]:
        """obs (batch, *obs_shape) -> (action distribution, value (batch,)); feed-forward models only (a recurrent
        one steps with :meth:`step` and learns with :meth:`evaluate_sequence`: its core refuses this path)."""
        return self.decide(*self.prepare(obs))

    def decide(self, inputs: EncoderInput, mask: torch.Tensor | None) -> tuple[Distribution, torch.Tensor]:
        """:meth:`forward` from the encoder's input and the action mask (what :meth:`prepare` gives): an exported
        policy prepares its own inputs (daskrl/evaluation/export_graph.py)."""
        encoded = [self._encode(encoder, inputs) for encoder in self.encoders]
        features = self.core.stateless(encoded[0])
        return self.actor(features, mask), self.critic(encoded[-1]).squeeze(-1)

    def head_inputs(self, obs: torch.Tensor, with_value: bool = True
                    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Feed-forward models: what the action head and the value head read for ``obs`` (the value head's None
        without ``with_value``: its encoder is not run), and the action mask. Off-policy trainers read the heads
        apart: DQN's dueling streams, SAC's actor (whose value head it does not train)."""
        inputs, mask = self.prepare(obs)
        encoded = self._encode(self.encoder, inputs)
        value = None
        if with_value:
            value = encoded if self.value_encoder is None else self._encode(self.value_encoder, inputs)
        return self.core.stateless(encoded), value, mask

    def step(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[Distribution, torch.Tensor, torch.Tensor]:
        """Recurrent models: obs (batch, *obs_shape) and states [batch, S] -> (distribution, value, next states)."""
        return self.decide_step(*self.prepare(obs), state)

    def decide_step(self, inputs: EncoderInput, mask: torch.Tensor | None,
                    state: torch.Tensor) -> tuple[Distribution, torch.Tensor, torch.Tensor]:
        """:meth:`step` from the encoder's input and the action mask (see :meth:`decide`)."""
        out, state = self.core.step(self._encode(self.encoder, inputs), state)
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

    def prepare(self, obs: torch.Tensor) -> tuple[EncoderInput, torch.Tensor | None]:
        """-> (the encoder's input, the action mask or None), as the observation adapter makes them: normalized
        with the stored statistics (clipped to +-5) when enabled; Dict observations (packed records) unpacked into
        one tensor per key first, only their float vectors normalized."""
        return self.observations.encoder_input(obs, self)

    def obs_for_stats(self, obs: np.ndarray) -> np.ndarray:
        """The part of observations [M, ...] that normalization keeps statistics of ([M, *obs_norm_shape])."""
        return self.observations.stats_part(obs)

    def use_bfloat16_encoders(self) -> None:
        """Samplers only: keep the encoders' weights in bfloat16 and run them under autocast.

        An image policy's conv stack is nearly all of its cost, and CPUs with native bfloat16 (AVX512-BF16, AMX)
        run it about twice as fast. The heads stay float32, so the log-probs and values written for the learner
        are exactly those of the policy that acted. Weights loaded afterwards are rounded to bfloat16, but for an image
        encoder's first convolution (FrameConv): it stays float32, so autocast rounds its scaled weights (w / 255) once,
        as a learner's autocast does; rounded to bfloat16 first, then scaled and rounded again, a quarter of them came
        out one bfloat16 step off the learner's.
        """
        for encoder in self.encoders:
            first = [(m, {k: v.clone() for k, v in m.state_dict().items()})
                     for m in encoder.modules() if isinstance(m, FrameConv)]
            encoder.to(torch.bfloat16)
            for module, weights in first:  # back to float32, unrounded
                module.float().load_state_dict(weights)
        self.encoder_dtype = self.encoder_autocast = torch.bfloat16

    def train_encoders_in_bfloat16(self) -> None:
        """Learners (--learner-precision): run the encoders under bfloat16 autocast, their float32 weights and
        gradients kept (autocast casts a copy per step), the heads in float32, so log-probs, values and losses are
        computed in float32 from bfloat16 features."""
        self.encoder_autocast = torch.bfloat16

    def _encode(self, encoder: nn.Module, obs: torch.Tensor | dict[str, torch.Tensor]) -> torch.Tensor:
        if self.encoder_autocast is None:
            return encoder(obs)
        with torch.autocast(self.critic.weight.device.type, dtype=self.encoder_autocast):
            return encoder(obs).float()

    def set_obs_stats(self, mean: Any, var: Any, count: float = 0.0) -> None:
        """Load the learner's running statistics (nothing to load without normalization)."""
        self.observations.set_statistics(self, mean, var, count)

    def set_return_stats(self, mean: float, var: float, count: float) -> None:
        self.return_stats.copy_(torch.tensor([mean, var, count], dtype=torch.float64))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """Value only (bootstrap values), skipping the action head (and the policy's encoder when the value head
        has its own); feed-forward models only (a recurrent one: :meth:`value_step`)."""
        inputs, _ = self.prepare(obs)
        return self.critic(self.core.stateless(self._encode(self.encoders[-1], inputs))).squeeze(-1)

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
        self, obs_np: np.ndarray, deterministic: bool | np.ndarray = False, state: np.ndarray | None = None,
        generator: torch.Generator | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rollout path: numpy obs batch -> (actions, log_prob float32, value float32) as numpy.

        The obs array is wrapped without a copy (unless it is read-only); results are
        views of the output tensors. A recurrent model reads its states from ``state`` (float32 [batch, S]) and
        writes the next states there, in place (a sampler's shared memory, say). ``deterministic`` may also be a
        bool per row (a policy server's batch mixes requests that want the most likely action and those that sample).
        ``generator``: what sampled actions are drawn from (a sampler's split has its own; None: torch's).
        """
        if not obs_np.flags.writeable:
            obs_np = obs_np.copy()  # torch warns on read-only arrays; encoders never write anyway
        device = self.critic.weight.device
        obs = torch.from_numpy(obs_np).to(device, non_blocking=True)
        dist, value = self.core.act(self, obs, state)
        actions = _choose(dist, deterministic, generator)
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


def _choose(dist: Distribution, deterministic: bool | np.ndarray, generator: torch.Generator | None = None
            ) -> torch.Tensor:
    """The most likely actions, sampled ones, or per row (``deterministic`` a bool array: True rows take the mode)."""
    if isinstance(deterministic, np.ndarray):
        mode, sample = dist.mode(), dist.sample(generator)
        rows = torch.as_tensor(deterministic, dtype=torch.bool, device=mode.device)
        return torch.where(rows.reshape(-1, *[1] * (mode.dim() - 1)), mode, sample)
    return dist.mode() if deterministic else dist.sample(generator)


def _shares_encoder(model: ModelConfig, has_image: bool, shared_encoder: bool | None) -> bool:
    """Whether both heads read one encoder: as ``shared_encoder`` says, else as ``--value-encoder`` says, and with
    'auto' for images (the conv stack dominates the cost) and recurrent models, which must (one encoder and one core
    for both heads: models/recurrent.py)."""
    if shared_encoder is None:
        shared_encoder = {"shared": True, "separate": False}.get(model.value_encoder)
    shared = has_image or model.rnn != "none" if shared_encoder is None else bool(shared_encoder)
    if model.rnn != "none" and not shared:
        raise ValueError("a recurrent core is shared by both heads, so the encoder must be shared too: leave out "
                         "--value-encoder separate")
    return shared


def check_model(config: Config, spaces: EnvSpaces) -> None:
    """Build the run's network once in the driver, so a model option that cannot work (an unsuitable encoder, a
    registered core that answers in other shapes) is a :class:`ConfigError` before any component is created, not a
    failure in every worker."""
    try:
        build_model(spaces, config.model, config.run.seed)
    except (ValueError, TypeError) as exc:
        m = config.model
        what = f"--encoder {m.encoder!r}" + (f" with --rnn {m.rnn!r}" if m.rnn != "none" else "")
        shape = observation_kind(spaces).describe(spaces)
        raise ConfigError([f"{what} cannot be built for this env's observations {shape}: {exc}"]) from exc


def build_model(spaces: EnvSpaces, model: ModelConfig, seed: int) -> ActorCritic:
    """The one place where the config turns into a network: the learner, the samplers and ``enjoy`` build the same
    one (seeded, so every process starts from the same initial weights)."""
    torch.manual_seed(seed)
    return ActorCritic(spaces, model)
