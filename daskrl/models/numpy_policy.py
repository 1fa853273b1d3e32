"""The inline fast path: an MLP actor-critic's ``act`` in plain numpy, built from the torch model's weights.

Why: with cheap envs (a CartPole step costs a few microseconds) the policy's forward pass is a large share of a
rollout worker's time, and at these sizes torch's per-op overhead dominates: ``act`` on a few dozen CartPole
observations takes several times longer in torch than here (docs/performance.md). This computes the same function, the same
Gumbel-max sampling, the same log-probabilities and values, and is checked against the torch model in tests.
Recurrent models with daskrl's LSTM or GRU core run their cell here too (one step, states read and written in place,
as the samplers keep them). Models it cannot express (CNN encoders, multi-discrete heads, the heads of Tuple and Dict
actions, custom encoders or cores, Dict observations) keep the torch path.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from torch import nn

from daskrl.models.actor_critic import ActorCritic
from daskrl.models.encoders import MlpEncoder
from daskrl.models.heads import ClippedGaussian
from daskrl.models.recurrent import RecurrentCore


def _tanh(x: np.ndarray) -> np.ndarray:
    return np.tanh(x, out=x)


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0, out=x)


_ACTIVATIONS = {"Tanh": _tanh, "ReLU": _relu}


class NumpyPolicy:
    """``act(obs) -> (actions, log_probs, values)`` like :meth:`ActorCritic.act`, in numpy.

    The policy and value MLPs run as one network (see ``_FusedLayer``) and the two heads as one matmul: at
    the batch sizes of a rollout worker (16-64 observations) numpy's per-call overhead, not arithmetic, sets
    the cost, so fewer calls means a cheaper step.
    """

    def __init__(self, model: ActorCritic, rng: np.random.Generator | None = None) -> None:
        self.model = model
        self.rng = rng or np.random.default_rng()
        self.kind = model.spaces.action_kind
        self.refresh()

    @staticmethod
    def supports(model: ActorCritic) -> bool:
        if model.spaces.action_kind not in ("discrete", "box") or model.spaces.is_image or model.spaces.is_dict:
            return False  # Dict observations (packed records, per-key encoders) stay with torch
        if model.recurrent and (type(model.core) is not RecurrentCore
                                or type(model.core.rnn) not in (nn.LSTM, nn.GRU)):
            return False  # a registered core: only torch knows it
        if model.spaces.action_kind == "box" and (model.actor.distribution not in (None, ClippedGaussian)
                                                  or model.actor.state_std):
            return False  # tanh squashing, and a log-std that depends on the state, stay with torch
        patterns = []
        for encoder in _encoders(model):
            if type(encoder) is not MlpEncoder:  # a registered subclass may compute otherwise: torch runs it
                return False
            pattern = [type(layer).__name__ for layer in encoder.net]
            if any(name != "Linear" and name not in _ACTIVATIONS for name in pattern):
                return False
            patterns.append(pattern)
        return all(p == patterns[0] for p in patterns)  # separate encoders fuse only when they match

    def refresh(self) -> None:
        """Copy the weights (and observation statistics) out of the torch model; call after each load."""
        m = self.model
        encoders = _encoders(m)
        per_encoder = [_layers(e) for e in encoders]  # supports() checked that they line up layer by layer
        self.layers = [_FusedLayer(parts, first=k == 0) for k, parts in enumerate(zip(*per_encoder, strict=True))]
        head = m.actor.logits if self.kind == "discrete" else m.actor.mean
        head_w, value_w = _weight(head), _weight(m.critic)
        self.num_outputs = head_w.shape[1]
        if len(encoders) == 1 or not self.layers:  # the same features feed both heads
            self.head_w = np.concatenate([head_w, value_w], axis=1)
        else:  # policy features feed the action head, value features the value head
            self.head_w = _block_diagonal([head_w, value_w])
        self.head_b = np.concatenate([_bias(head), _bias(m.critic)])
        self.cell = _NumpyCell(m.core) if m.recurrent else None
        if self.kind == "box":
            log_std = m.actor.log_std.detach().numpy().astype(np.float32)
            self.log_std, self.std = log_std, np.exp(log_std)
            self.log_prob_offset = np.float32(log_std.sum() + 0.5 * log_std.size * np.log(2 * np.pi))
            clipped = m.actor.distribution is ClippedGaussian
            self.low = m.actor.low.numpy() if clipped else None
            self.high = m.actor.high.numpy() if clipped else None
        if m.normalize_obs:
            self.obs_mean = m.obs_mean.numpy().reshape(-1).astype(np.float32)
            self.obs_inv_std = (1.0 / np.sqrt(m.obs_var.numpy().reshape(-1) + 1e-8)).astype(np.float32)
        else:
            self.obs_mean = None
        self._rows = np.arange(0)

    def act(self, obs: np.ndarray, deterministic: bool = False,
            state: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """As :meth:`ActorCritic.act`: a recurrent model reads its states from ``state`` [n, S] and writes the next
        ones there."""
        n = obs.shape[0]
        x = obs.reshape(n, -1)
        if self.obs_mean is not None:
            x = np.subtract(x, self.obs_mean, dtype=np.float32)
            x *= self.obs_inv_std
            np.clip(x, -5.0, 5.0, out=x)
        else:
            x = x.astype(np.float32, copy=False)
        for layer in self.layers:
            x = layer(x)
        if self.cell is not None:
            if state is None:
                raise TypeError("a recurrent model acts from its state: pass state=")
            x = self.cell(x, state)
        out = x @ self.head_w
        out += self.head_b
        k = self.num_outputs
        values = out[:, k].copy()
        if self.kind == "discrete":
            logits = out[:, :k]
            logits -= logits.max(axis=1, keepdims=True)
            log_norm = np.log(np.exp(logits).sum(axis=1))
            if deterministic:
                actions = logits.argmax(axis=1)
            else:  # Gumbel-max, as the torch Categorical does (an exponential draw of exactly 0 is harmless)
                noise = self.rng.standard_exponential((n, k), dtype=np.float32)
                with np.errstate(divide="ignore"):
                    np.log(noise, out=noise)
                actions = np.subtract(logits, noise, out=noise).argmax(axis=1)
            if self._rows.size != n:
                self._rows = np.arange(n)
            log_probs = logits[self._rows, actions] - log_norm
            return actions.astype(np.int64, copy=False), log_probs, values
        mean = out[:, :k]
        if deterministic:
            actions, log_probs = mean.copy(), np.full(n, -self.log_prob_offset, np.float32)
            noise = np.zeros_like(mean)
        else:
            noise = self.rng.standard_normal((n, k), dtype=np.float32)
            actions = noise * self.std
            actions += mean
            log_probs = np.einsum("ij,ij->i", noise, noise)
            log_probs *= np.float32(-0.5)
            log_probs -= self.log_prob_offset
        if self.low is not None:
            self._clip(actions, mean, noise, log_probs)
        return actions.reshape(n, *self.model.spaces.action_shape), log_probs, values

    def _clip(self, actions: np.ndarray, mean: np.ndarray, noise: np.ndarray, log_probs: np.ndarray) -> None:
        """Clip to the Box in place and give clipped components the probability of the tail beyond their bound, as
        :class:`~daskrl.models.heads.ClippedGaussian` does (only the rare clipped entries are recomputed)."""
        below, above = actions <= self.low, actions >= self.high
        if below.any() or above.any():
            for side, bound, sign in ((below, self.low, 1.0), (above, self.high, -1.0)):
                rows, cols = np.nonzero(side)
                if rows.size:
                    inside = -0.5 * noise[rows, cols] ** 2 - self.log_std[cols] - _HALF_LOG_2PI
                    tail = _log_ndtr(sign * (bound[cols] - mean[rows, cols]) / self.std[cols])
                    np.add.at(log_probs, rows, (tail - inside).astype(np.float32))
            np.clip(actions, self.low, self.high, out=actions)


_HALF_LOG_2PI = np.float32(0.5 * math.log(2 * math.pi))


def _log_ndtr(x: np.ndarray) -> np.ndarray:
    """log Phi(x) elementwise (numpy has no erfc): erfc where it is accurate, the asymptotic series in the far left
    tail, as torch.special.log_ndtr does."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    near = x > -20.0
    out[near] = np.log([0.5 * math.erfc(-v / math.sqrt(2.0)) for v in x[near]] or np.empty(0))
    far = x[~near]
    r = 1.0 / far**2
    out[~near] = -0.5 * far**2 - np.log(-far) - 0.5 * math.log(2 * math.pi) + np.log1p(-r + 3 * r**2 - 15 * r**3)
    return out


def _encoders(model: ActorCritic) -> list:
    """The policy encoder, then the value encoder when the model has a separate one."""
    return list(model.encoders)


def _weight(linear) -> np.ndarray:
    """A torch Linear's weight as (in, out) float32, so a batch multiplies it from the left."""
    return linear.weight.detach().numpy().T.astype(np.float32)


def _bias(linear) -> np.ndarray:
    return linear.bias.detach().numpy().astype(np.float32)


def _layers(encoder: MlpEncoder) -> list[tuple[np.ndarray, np.ndarray, Callable | None]]:
    """(weight, bias, activation or None) per Linear of an MLP encoder."""
    layers: list = []
    for layer in encoder.net:
        name = type(layer).__name__
        if name == "Linear":
            layers.append([_weight(layer), _bias(layer), None])
        else:
            layers[-1][2] = _ACTIVATIONS[name]
    return [tuple(layer) for layer in layers]


class _FusedLayer:
    """Layer k of every encoder at once, their outputs side by side in one array (one bias add, one
    activation). The first layer reads the shared observation, so its weights sit side by side (one matmul);
    a later layer reads each encoder's own block of columns. Those are separate matmuls into one output:
    a block-diagonal weight would be one call but twice the arithmetic, slower from 16 rows up."""

    def __init__(self, parts: tuple, first: bool) -> None:
        weights = [w for w, _, _ in parts]
        self.weight = np.concatenate(weights, axis=1) if first or len(parts) == 1 else None
        self.blocks = []
        row = col = 0
        for w in weights:
            self.blocks.append((slice(row, row + w.shape[0]), slice(col, col + w.shape[1]), w))
            row, col = row + w.shape[0], col + w.shape[1]
        self.width = col
        self.bias = np.concatenate([b for _, b, _ in parts])
        self.activation = parts[0][2]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.weight is not None:
            y = x @ self.weight
        else:
            y = np.empty((x.shape[0], self.width), np.float32)
            for rows, cols, w in self.blocks:
                np.matmul(x[:, rows], w, out=y[:, cols])
        y += self.bias
        if self.activation is not None:
            self.activation(y)
        return y


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """In place, through tanh: no overflow warnings for large inputs, one call."""
    x *= 0.5
    np.tanh(x, out=x)
    x *= 0.5
    x += 0.5
    return x


class _NumpyCell:
    """One step of :class:`RecurrentCore`'s ``nn.LSTM`` / ``nn.GRU`` (torch's gate order and bias placement) over
    the flat states ``[n, S]`` (h then c, layer after layer: the core's layout), written back in place."""

    def __init__(self, core: RecurrentCore) -> None:
        self.lstm = isinstance(core.rnn, nn.LSTM)
        self.layers, self.size = core.layers, core.size
        rnn = core.rnn

        def get(name: str, layer: int) -> np.ndarray:
            return getattr(rnn, f"{name}_l{layer}").detach().numpy().astype(np.float32)

        self.w_ih = [get("weight_ih", k).T.copy() for k in range(self.layers)]
        self.w_hh = [get("weight_hh", k).T.copy() for k in range(self.layers)]
        self.b_ih = [get("bias_ih", k) for k in range(self.layers)]
        self.b_hh = [get("bias_hh", k) for k in range(self.layers)]
        self.b_sum = [a + b for a, b in zip(self.b_ih, self.b_hh, strict=True)]

    def __call__(self, x: np.ndarray, state: np.ndarray) -> np.ndarray:
        n, size = x.shape[0], self.size
        parts = state.reshape(n, 2 if self.lstm else 1, self.layers, size)  # a view: the writes reach ``state``
        for k in range(self.layers):
            h = parts[:, 0, k]
            if self.lstm:
                gates = x @ self.w_ih[k]
                gates += h @ self.w_hh[k]
                gates += self.b_sum[k]
                _sigmoid(gates[:, :2 * size])  # input and forget gates
                _sigmoid(gates[:, 3 * size:])  # output gate
                cell = np.tanh(gates[:, 2 * size:3 * size])
                cell *= gates[:, :size]
                c = parts[:, 1, k]
                c *= gates[:, size:2 * size]
                c += cell
                out = np.tanh(c)
                out *= gates[:, 3 * size:]
            else:
                gi = x @ self.w_ih[k]
                gi += self.b_ih[k]
                gh = h @ self.w_hh[k]
                gh += self.b_hh[k]
                rz = _sigmoid(gi[:, :2 * size] + gh[:, :2 * size])
                cand = gh[:, 2 * size:]
                cand *= rz[:, :size]
                cand += gi[:, 2 * size:]
                np.tanh(cand, out=cand)
                z = rz[:, size:]
                out = h - cand  # h' = (1 - z) * n + z * h = n + z * (h - n)
                out *= z
                out += cand
            h[...] = out
            x = out
        return x


def _block_diagonal(blocks: list[np.ndarray]) -> np.ndarray:
    out = np.zeros((sum(b.shape[0] for b in blocks), sum(b.shape[1] for b in blocks)), np.float32)
    r = c = 0
    for b in blocks:
        out[r:r + b.shape[0], c:c + b.shape[1]] = b
        r, c = r + b.shape[0], c + b.shape[1]
    return out
