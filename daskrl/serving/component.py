"""A policy server on a Dask worker: a daskrl component (an actor with its own thread) that batches requests from
the Dask client (its ``act`` method) and, when asked, from HTTP on the worker's host.

The component's own thread runs the batcher (:mod:`daskrl.serving.batching`) as its hot loop; ``act`` is an async
control method, so concurrent calls from the client wait on the worker's event loop and share forward passes. The
HTTP server has a thread and an event loop of its own (:mod:`daskrl.serving.http_app`). The weights come with the
setup (a checkpoint's, loaded by the caller) or from a live run's parameter block (:mod:`daskrl.serving.live`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from daskrl.config import ModelConfig
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.models.actor_critic import build_model
from daskrl.models.registry import Shipped, install_components
from daskrl.runtime.actors.component import Component
from daskrl.runtime.memory.shm import host_of
from daskrl.serving.http_app import HttpFrontend
from daskrl.serving.http_guard import HttpGuard
from daskrl.serving.live import FixedWeights, LiveWeights
from daskrl.serving.policy import ServedPolicy
from daskrl.serving.service import PolicyService


@dataclass(frozen=True)
class ServeSetup:
    """Everything a :class:`PolicyServer` is built from (:func:`daskrl.serving.serve` fills every field)."""

    spaces: EnvSpaces
    model: ModelConfig
    seed: int
    components: Shipped  # the user's registered model components (daskrl/models/registry.py)
    env: str
    weights: dict[str, np.ndarray] | None  # a checkpoint's; None: the followed run's
    version: int
    follow: str  # the live run whose newest weights are served ("" for a checkpoint)
    params: dict | None  # that run's parameter block for this policy
    policy_index: int
    about: dict[str, Any]  # what GET / says besides the spaces: experiment, checkpoint or run
    deterministic: bool  # what a request that does not say gets
    max_batch: int
    max_wait_ms: float
    max_clients: int
    max_batch_rows: int  # the most observations one request may carry
    http_host: str | None  # None: no HTTP; "": the worker's own host
    http_port: int  # 0: a free port
    http_guard: HttpGuard  # token, body bound, TLS
    torch_threads: int


class PolicyServer(Component):
    """See the module docstring."""

    def on_configure(self, setup: ServeSetup) -> None:
        torch.set_num_threads(setup.torch_threads)
        install_components(setup.components)
        model = build_model(setup.spaces, setup.model, setup.seed)
        if setup.weights is not None:
            model.load_state_dict_numpy(setup.weights)
        policy = ServedPolicy(model, setup.version, setup.env, setup.deterministic)
        self.weights: FixedWeights | LiveWeights = FixedWeights()
        if setup.params is not None:
            self.weights = LiveWeights(self, setup.follow, setup.policy_index, setup.params, policy)
            self.weights.first()
        self.service = PolicyService(policy, setup.max_batch, setup.max_wait_ms, setup.max_clients, setup.about,
                                     refresh=self.weights.refresh, max_batch_rows=setup.max_batch_rows)
        self.http: HttpFrontend | None = None
        if setup.http_host is not None:  # bound now: a port in use fails the configure call, in one line
            self.http = HttpFrontend(self.service, setup.http_host or host_of(self.worker.address), setup.http_port,
                                     setup.http_guard)

    def on_start(self) -> None:
        if self.http is not None:
            self.http.start()

    def run_once(self) -> bool:
        self.service.serve_once(timeout=0.02)
        return True  # the wait above is the loop's idle time: no further wait for control messages

    async def act(self, observations: Any, client_id: str | None = None, deterministic: bool | None = None,
                  reset: Any = False) -> dict[str, Any]:
        """``{"actions": [rows, ...], "policy_version": v}`` for one observation or a batch (a bad one raises
        :class:`~daskrl.errors.RequestError`)."""
        return await asyncio.wrap_future(self.service.request(observations, client_id, deterministic, reset))

    async def info(self) -> dict[str, Any]:
        """The spaces, the version, the batching settings and the HTTP address (None without HTTP)."""
        return {**self.service.info(), "url": self.url}

    @property
    def url(self) -> str | None:
        return self.http.url if self.http is not None else None

    def extra_stats(self) -> dict[str, Any]:
        return {"serving": self.service.stats(), "url": self.url, **self.weights.stats()}

    def close_now(self) -> None:
        if getattr(self, "http", None) is not None:
            self.http.stop()
        if getattr(self, "service", None) is not None:
            self.service.batcher.drain(f"the policy server {self.name!r} stopped")
        super().close_now()
