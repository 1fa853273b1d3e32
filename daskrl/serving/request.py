"""One client's request, checked: the same checks for HTTP and for the Dask client, before it can reach a batch that
other clients share."""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from daskrl.errors import RequestError
from daskrl.serving.policy import ServedPolicy


@dataclass
class Request:
    """One client's observations, checked (see :func:`make_request`), and the future its answer goes to."""

    obs: np.ndarray  # [rows, *obs_shape]
    single: bool  # one observation was sent (not a batch of one)
    client_id: str | None
    deterministic: bool
    reset: np.ndarray  # a bool per row
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)

    @property
    def rows(self) -> int:
        return len(self.obs)


def make_request(policy: ServedPolicy, observations: Any, client_id: Any = None, deterministic: Any = None,
                 reset: Any = False) -> Request:
    """A checked request (the same checks for HTTP and for the Dask client); raises :class:`RequestError`."""
    obs, single = policy.observations(observations)
    if client_id is not None and not isinstance(client_id, str):
        raise RequestError(f"client_id must be a string, not {type(client_id).__name__}")
    if deterministic is None:
        deterministic = policy.deterministic
    if not isinstance(deterministic, (bool, np.bool_)):
        raise RequestError(f"deterministic must be true or false, not {deterministic!r}")
    return Request(obs, single, client_id, bool(deterministic), policy.resets(reset, len(obs)))
