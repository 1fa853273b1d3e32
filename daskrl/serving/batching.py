"""Concurrent requests gathered into one forward pass, as daskrl's inference worker batches many rollout workers.

Any thread submits a :class:`Request` and gets a future; one thread (the server's) calls
:meth:`RequestBatcher.serve_once` in a loop. It takes the first waiting request, then keeps taking more for at most
``max_wait_s`` or until ``max_batch`` rows, runs the policy once on all of them and hands each its rows of the
answer. Two requests of one client never share a pass of a recurrent policy (the second continues from the first's
state): the second waits for the next pass, and so does a request that would overflow ``max_batch`` (a single
request larger than that runs alone). New weights (a live run's) are taken before a pass starts, never during one.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from daskrl.errors import RequestError, one_line
from daskrl.serving.policy import ServedPolicy
from daskrl.serving.request import Request
from daskrl.serving.states import ClientStates, NoStates

logger = logging.getLogger(__name__)


class RequestBatcher:
    """See the module docstring. ``counters``: requests, rows, forward passes, passes shared by several requests,
    the most requests one pass served, and passes that failed."""

    def __init__(self, policy: ServedPolicy, states: NoStates | ClientStates, max_batch: int, max_wait_s: float,
                 refresh: Callable[[], None] = lambda: None) -> None:
        """``refresh``: called before each pass (and when idle) to take newer weights, if any."""
        self.policy, self.states = policy, states
        self.max_batch, self.max_wait_s = max_batch, max_wait_s
        self.refresh = refresh
        self._queue: queue.SimpleQueue[Request] = queue.SimpleQueue()
        self._held: deque[Request] = deque()  # taken but left for the next pass, in arrival order
        self.counters: dict[str, int] = {"requests": 0, "rows": 0, "forward_passes": 0, "shared_passes": 0,
                                         "largest_pass_requests": 0, "failed_passes": 0}

    def submit(self, request: Request) -> concurrent.futures.Future:
        """Queue ``request`` (thread-safe); its future gets ``{"actions": [rows, ...], "policy_version": v, "single":
        one observation was sent}``."""
        self._queue.put(request)
        return request.future

    def serve_once(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a request, then answer it and whatever joins it in one pass; True when
        a pass ran."""
        self.refresh()
        batch = self._gather(timeout)
        if not batch:
            return False
        self._answer(batch)
        return True

    def drain(self, reason: str) -> None:
        """Tell every request still waiting that it will not be answered (the server stops)."""
        while (request := self._next(0)) is not None:
            _settle(request.future, error=RuntimeError(reason))

    def _next(self, timeout: float) -> Request | None:
        if self._held:
            return self._held.popleft()
        try:
            return self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()
        except queue.Empty:
            return None

    def _gather(self, timeout: float) -> list[Request]:
        batch: list[Request] = []
        rows, clients = 0, set()
        deadline = None
        while rows < self.max_batch:
            wait = timeout if deadline is None else deadline - time.monotonic()
            request = self._next(wait)
            if request is None:
                break
            if problem := self.states.problem(request):
                _settle(request.future, error=RequestError(problem))
                continue
            if batch and (rows + request.rows > self.max_batch or (self.states.keeps and request.client_id is not None
                                                                   and request.client_id in clients)):
                self._held.appendleft(request)  # first in the next pass
                break
            batch.append(request)
            rows += request.rows
            clients.add(request.client_id)
            if deadline is None:
                deadline = time.monotonic() + self.max_wait_s
        return batch

    def _answer(self, batch: list[Request]) -> None:
        obs = batch[0].obs if len(batch) == 1 else np.concatenate([r.obs for r in batch])
        deterministic = np.concatenate([np.full(r.rows, r.deterministic) for r in batch])
        states = self.states.gather(batch)
        try:
            actions = self.policy.act(obs, deterministic, states)
        except Exception as exc:  # the clients of this pass hear why; the server goes on serving the next
            self.counters["failed_passes"] += 1
            logger.exception("a forward pass of %d requests failed", len(batch))
            for r in batch:
                _settle(r.future, error=RuntimeError(f"the policy failed on this batch: {one_line(exc)}"))
            return
        self.states.store(batch, states)
        c = self.counters
        c["forward_passes"] += 1
        c["requests"] += len(batch)
        c["rows"] += len(obs)
        c["shared_passes"] += len(batch) > 1
        c["largest_pass_requests"] = max(c["largest_pass_requests"], len(batch))
        offset = 0
        for r in batch:
            _settle(r.future, {"actions": actions[offset:offset + r.rows], "policy_version": self.policy.version,
                               "single": r.single})
            offset += r.rows


def _settle(future: concurrent.futures.Future, result: Any = None, error: BaseException | None = None) -> None:
    """Answer a request, unless its client gave up on it meanwhile (an HTTP handler cancelled its wait)."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass
