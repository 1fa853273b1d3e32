"""A policy server's core, wherever it runs (this process, or a component on a Dask worker): the served policy, its
batcher and its recurrent states, what ``act`` needs from any thread, and what ``GET /`` and ``GET /stats`` show.

In this process a :class:`ServiceThread` drives the batcher; on a Dask worker the component's own thread does
(:mod:`daskrl.serving.component`).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any

from daskrl.serving.batching import RequestBatcher
from daskrl.serving.policy import ServedPolicy
from daskrl.serving.request import make_request
from daskrl.serving.states import states_for

logger = logging.getLogger(__name__)


class PolicyService:
    """See the module docstring. ``about``: what ``info()`` says besides the policy's spaces (experiment, checkpoint
    or followed run)."""

    def __init__(self, policy: ServedPolicy, max_batch: int, max_wait_ms: float, max_clients: int,
                 about: dict[str, Any], refresh: Callable[[], None] = lambda: None,
                 max_batch_rows: int | None = None) -> None:
        self.policy = policy
        self.states = states_for(policy.state_size, max_clients)
        self.batcher = RequestBatcher(policy, self.states, max_batch, max_wait_ms / 1000.0, refresh)
        self.max_batch_rows = max_batch_rows
        self.about = dict(about, max_batch=max_batch, max_wait_ms=max_wait_ms, max_clients=max_clients,
                          max_batch_rows=max_batch_rows)

    def request(self, observations: Any, client_id: Any = None, deterministic: Any = None,
                reset: Any = False) -> concurrent.futures.Future:
        """Check and queue one request (from any thread); raises :class:`~daskrl.errors.RequestError` at once for
        a bad one. The future gets ``{"actions": [rows, ...], "policy_version": v}``."""
        return self.batcher.submit(make_request(self.policy, observations, client_id, deterministic, reset,
                                                self.max_batch_rows))

    def serve_once(self, timeout: float) -> bool:
        return self.batcher.serve_once(timeout)

    def info(self) -> dict[str, Any]:
        return {**self.policy.info(), **self.about}

    def stats(self) -> dict[str, Any]:
        """The batching counters (``shared_passes``: forward passes that served more than one request), the
        version served and the clients whose recurrent states are kept."""
        return {**self.batcher.counters, "policy_version": self.policy.version, "clients_with_state": len(self.states)}


class ServiceThread:
    """Drives a :class:`PolicyService` from a thread of this process (the local server)."""

    def __init__(self, service: PolicyService) -> None:
        self.service = service
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="daskrl-serve", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.service.serve_once(timeout=0.05)
            except Exception:  # a bug in a pass is the pass's clients' problem (they were told); keep serving
                logger.exception("the policy server's loop raised")

    def stop(self) -> None:
        """Stop serving; requests still waiting are told the server closed."""
        self._stop.set()
        self._thread.join(timeout=10)
        self.service.batcher.drain("the policy server closed")
