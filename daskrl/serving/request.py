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


#: the longest client id kept (a recurrent policy keeps a state per id: the id is a key, not a payload)
MAX_CLIENT_ID_CHARS = 256


def make_request(policy: ServedPolicy, observations: Any, client_id: Any = None, deterministic: Any = None,
                 reset: Any = False, max_rows: int | None = None) -> Request:
    """A checked request (the same checks for HTTP and for the Dask client); raises :class:`RequestError`.
    ``max_rows``: the most observations one request may carry (``--max-batch-rows``; None: any number)."""
    obs, single = policy.observations(observations)
    if max_rows is not None and len(obs) > max_rows:
        raise RequestError(f"{len(obs):,} observations in one request: this server takes at most {max_rows:,} "
                           "(--max-batch-rows); send them in several requests")
    if client_id is not None and not isinstance(client_id, str):
        raise RequestError(f"client_id must be a string, not {type(client_id).__name__}")
    if client_id is not None and len(client_id) > MAX_CLIENT_ID_CHARS:
        raise RequestError(f"a client_id of {len(client_id):,} characters: at most {MAX_CLIENT_ID_CHARS}")
    if deterministic is None:
        deterministic = policy.deterministic
    if not isinstance(deterministic, (bool, np.bool_)):
        raise RequestError(f"deterministic must be true or false, not {deterministic!r}")
    return Request(obs, single, client_id, bool(deterministic), policy.resets(reset, len(obs)))
