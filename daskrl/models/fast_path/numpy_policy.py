"""The inline fast path: an MLP actor-critic's ``act`` in plain numpy, from its published weights and a plan.

Why: with cheap envs (a CartPole step costs a few microseconds) the policy's forward pass is a large share of a
rollout worker's time, and at these sizes torch's per-op overhead dominates: ``act`` on a few dozen CartPole
observations takes several times longer in torch than here (docs/performance.md). This computes the same function, the same
Gumbel-max sampling, the same log-probabilities and values, and is checked against the torch model in tests.
Recurrent models with daskrl's LSTM or GRU core run their cell here too (one step, states read and written in place,
as the samplers keep them). Dict observations whose keys are all float vectors (PettingZoo's classic games: a board
and an action mask) are read from their packed records: the vectors concatenated into the MLP, the mask's forbidden
actions never drawn. Models it cannot express (CNN encoders, multi-discrete heads, the heads of Tuple and Dict
actions, custom encoders or cores, Dict observations with images or indices) keep the torch path.

This module does not import torch: a sampler builds it from the learner's plan (:mod:`daskrl.models.fast_path.numpy_plan`,
which names the weights of each layer) and the weights it reads from the parameter block, so a rollout worker on
this path never loads torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from daskrl.models.actor_critic import ActorCritic


def _tanh(x: np.ndarray) -> np.ndarray:
    return np.tanh(x, out=x)


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0, out=x)


_ACTIVATIONS = {"Tanh": _tanh, "ReLU": _relu}

Weights = dict[str, np.ndarray]


class NumpyPolicy:
    """``act(obs) -> (actions, log_probs, values)`` like :meth:`ActorCritic.act`, in numpy.

    The policy and value MLPs run as one network (see ``_FusedLayer``) and the two heads as one matmul: at
    the batch sizes of a rollout worker (16-64 observations) numpy's per-call overhead, not arithmetic, sets
    the cost, so fewer calls means a cheaper step.

    Built with ``critic=False`` it computes the policy alone and its ``values`` are None: samplers do, since the
    learner computes its own values from the trajectories and nothing reads a sampler's. With separate encoders
    that skips the value encoder, a quarter of a CartPole step's ``act`` (docs/performance.md); with one shared
    encoder (recurrent models always have one) only the value column of the heads' matmul goes.
    """

    def __init__(self, plan: dict[str, Any], weights: Weights, rng: np.random.Generator | None = None,
                 critic: bool = True) -> None:
        """``plan``: :func:`~daskrl.models.fast_path.numpy_plan.numpy_plan` of the model; ``weights``: its state dict
        as numpy arrays (what the learner publishes); ``critic``: whether ``act`` computes the values too."""
        self.plan = plan
        self.rng = rng or np.random.default_rng()
        self.kind = plan["kind"]
        self.action_shape = tuple(plan["action_shape"])
        self.recurrent = plan["core"] is not None
        self.critic = critic
        self.record = plan.get("record")  # Dict records: where the vectors and the action mask lie
        self.load(weights)

    @classmethod
    def from_model(cls, model: ActorCritic, rng: np.random.Generator | None = None, critic: bool = True
                   ) -> NumpyPolicy:
        """From a torch model (tests, and samplers that built one): its plan and its current weights."""
        from daskrl.models.fast_path.numpy_plan import numpy_plan

        plan = numpy_plan(model)
        if plan is None:
            raise ValueError("the numpy fast path cannot compute this model (see numpy_plan.supports)")
        return cls(plan, model.state_dict_numpy(), rng, critic)

    @staticmethod
    def supports(model: ActorCritic) -> bool:
        from daskrl.models.fast_path.numpy_plan import supports

        return supports(model)

    def load(self, weights: Weights) -> None:
        """Take a new version's weights (and observation statistics)."""
        plan = self.plan

        def get(key: str) -> np.ndarray:
            return np.asarray(weights[key], dtype=np.float32)

        def layer(spec: dict) -> tuple[np.ndarray, np.ndarray, Callable | None]:
            activation = _ACTIVATIONS[spec["activation"]] if spec["activation"] else None
            return get(spec["weight"]).T, get(spec["bias"]), activation

        encoders = plan["encoders"] if self.critic else plan["encoders"][:1]  # the policy's encoder comes first
        per_encoder = [[layer(spec) for spec in specs] for specs in encoders]  # they line up layer by layer
        self.layers = [_FusedLayer(parts, first=k == 0) for k, parts in enumerate(zip(*per_encoder, strict=True))]
        head_w, head_b = get(plan["head"]["weight"]).T, get(plan["head"]["bias"])
        self.num_outputs = head_w.shape[1]
        if not self.critic:
            self.head_w, self.head_b = np.ascontiguousarray(head_w), head_b
        else:
            value_w = get(plan["critic"]["weight"]).T
            if len(encoders) == 1 or not self.layers:  # the same features feed both heads
                self.head_w = np.concatenate([head_w, value_w], axis=1)
            else:  # policy features feed the action head, value features the value head
                self.head_w = _block_diagonal([head_w, value_w])
            self.head_b = np.concatenate([head_b, get(plan["critic"]["bias"])])
        self.cell = _NumpyCell(plan["core"], weights) if self.recurrent else None
        if self.kind == "box":
            log_std = get(plan["log_std"]).reshape(-1)
            self.log_std, self.std = log_std, np.exp(log_std)
            self.log_prob_offset = np.float32(log_std.sum() + 0.5 * log_std.size * np.log(2 * np.pi))
            bounds = plan["bounds"]
            self.low = np.asarray(bounds[0], np.float32).reshape(-1) if bounds else None
            self.high = np.asarray(bounds[1], np.float32).reshape(-1) if bounds else None
        if plan["obs_norm"]:
            self.obs_mean = get(plan["obs_norm"]["mean"]).reshape(-1)
            self.obs_inv_std = (1.0 / np.sqrt(get(plan["obs_norm"]["var"]).reshape(-1) + 1e-8)).astype(np.float32)
        else:
            self.obs_mean = None
        self._rows = np.arange(0)

    def act(self, obs: np.ndarray, deterministic: bool = False,
            state: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """As :meth:`ActorCritic.act` (values None without the critic): a recurrent model reads its states from
        ``state`` [n, S] and writes the next ones there."""
        n = obs.shape[0]
        x, allowed = self._read(obs) if self.record is not None else (obs.reshape(n, -1), None)
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
        values = out[:, k].copy() if self.critic else None
        if self.kind == "discrete":
            logits = out[:, :k]
            if allowed is not None:  # as the torch head: forbidden logits at -inf, never drawn, probability 0
                logits[~allowed] = -np.inf
            logits -= logits.max(axis=1, keepdims=True)
            log_norm = np.log(np.exp(logits).sum(axis=1))
            if deterministic:
                actions = logits.argmax(axis=1)
            else:  # Gumbel-max, as the torch Categorical does
                noise = self.rng.standard_exponential((n, k), dtype=np.float32)
                with np.errstate(divide="ignore", invalid="ignore"):
                    np.log(noise, out=noise)
                    scores = np.subtract(logits, noise, out=noise)
                if allowed is not None:  # an exponential draw of exactly 0 makes a forbidden score -inf + inf: NaN,
                    scores[~allowed] = -np.inf  # which argmax would take
                actions = scores.argmax(axis=1)
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
        return actions.reshape(n, *self.action_shape), log_probs, values

    def _read(self, records: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Packed Dict records [n, bytes] -> the float vectors side by side [n, features], and which actions the
        mask allows [n, actions] (None without one)."""
        def part(offset: int, nbytes: int) -> np.ndarray:
            return np.ascontiguousarray(records[:, offset:offset + nbytes]).view(np.float32)

        fields = [part(*where) for where in self.record["fields"]]
        x = fields[0] if len(fields) == 1 else np.concatenate(fields, axis=1)
        mask = self.record["mask"]
        return x, None if mask is None else part(*mask) > 0.5

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

    def __init__(self, core: dict[str, Any], weights: Weights) -> None:
        """``core``: the plan's ``{"cell", "layers", "size", "prefix"}``; ``weights``: the model's state dict."""
        self.lstm = core["cell"] == "lstm"
        self.layers, self.size = int(core["layers"]), int(core["size"])

        def get(name: str, layer: int) -> np.ndarray:
            return np.asarray(weights[f"{core['prefix']}.{name}_l{layer}"], dtype=np.float32)

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
