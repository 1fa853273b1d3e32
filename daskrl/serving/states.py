"""Recurrent states of a served policy: one per client id and observation row, kept between requests.

A client that plays one env sends one observation per request; one that steps a vector of envs sends a batch, and
each row keeps its own state. A request with ``reset`` (true, or true for some rows) starts those rows from zeros,
as an episode does. A request without a client id starts from zeros and leaves nothing behind. The store keeps the
``capacity`` most recently seen clients (an id not seen since is forgotten, as if it reset).

The batcher's thread alone reads and writes a store: no lock. A feed-forward policy gets :class:`NoStates`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from daskrl.serving.request import Request


class NoStates:
    """A feed-forward policy's: nothing to keep, so requests of one client may share a batch."""

    keeps = False

    def problem(self, request: Request) -> str:
        return ""

    def gather(self, batch: Sequence[Request]) -> None:
        return None

    def store(self, batch: Sequence[Request], states: None) -> None:
        pass

    def __len__(self) -> int:
        return 0


class ClientStates:
    """A recurrent policy's states by client id (see the module docstring)."""

    keeps = True

    def __init__(self, state_size: int, capacity: int) -> None:
        self.state_size = state_size
        self.capacity = capacity
        self._states: OrderedDict[str, np.ndarray] = OrderedDict()

    def problem(self, request: Request) -> str:
        """Why ``request`` cannot continue its client's states ("" when it can): a client that changes its number
        of rows must reset them all."""
        held = self._states.get(request.client_id) if request.client_id is not None else None
        if held is None or len(held) == request.rows or request.reset.all():
            return ""
        return (f"client {request.client_id!r} sent {len(held)} observation(s) per request before and {request.rows} "
                f"now: each row keeps its own recurrent state, so send the same number, or reset: true to start again")

    def gather(self, batch: Sequence[Request]) -> np.ndarray:
        """The states the batch's rows act from [N, S] (zeros for new clients, reset rows and anonymous requests)."""
        out = np.zeros((sum(r.rows for r in batch), self.state_size), np.float32)
        offset = 0
        for r in batch:
            held = self._states.get(r.client_id) if r.client_id is not None else None
            if held is not None and len(held) == r.rows:
                out[offset:offset + r.rows] = held
            out[offset:offset + r.rows][r.reset] = 0.0
            offset += r.rows
        return out

    def store(self, batch: Sequence[Request], states: np.ndarray) -> None:
        """Keep the states after the pass for each client of the batch (the oldest clients beyond ``capacity``
        are forgotten)."""
        offset = 0
        for r in batch:
            if r.client_id is not None:
                self._states[r.client_id] = states[offset:offset + r.rows].copy()
                self._states.move_to_end(r.client_id)
            offset += r.rows
        while len(self._states) > self.capacity:
            self._states.popitem(last=False)

    def __len__(self) -> int:
        return len(self._states)


def states_for(state_size: int, capacity: int) -> NoStates | ClientStates:
    """The store a policy with ``state_size`` floats of recurrent state needs (chosen once)."""
    return ClientStates(state_size, capacity) if state_size > 0 else NoStates()
