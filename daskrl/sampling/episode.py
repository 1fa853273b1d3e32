"""The record of one finished episode, as a rollout worker reports it and the driver reads it.

Every field has a name, and a reader never tells kinds of episodes apart by how many numbers they carry. Between
processes (a rollout worker's ``collect`` and final ``stop``, and a retiring worker's last word on Dask's event log)
episodes travel in their wire form, plain tuples of the five fields (:func:`wire_form`): pickling a named tuple costs
about 19 times a plain one's, at thousands of episodes a second from every rollout worker of a cheap env, on the
rollout worker's own process. :func:`episodes_from_event` makes them records again where the driver reads them. Being a
tuple, ``episode[0]`` and ``episode[1]`` are still its return and length, which is all
:class:`~daskrl.monitor.stats.EpisodeWindow` reads.
"""

from __future__ import annotations

from typing import NamedTuple

#: ``Episode.opponent`` of an episode that had no other agent in its env (a single-agent env)
NO_OPPONENT = -1


class Episode(NamedTuple):
    """``policy`` played it (the acting policy id: a self-play snapshot's is ``num_policies`` or more); in a
    multi-agent env ``opponent`` is the policy of the first other agent of its env and ``opponent_version`` the
    version that policy acted with (-1: unknown here, e.g. with remote inference)."""

    ret: float
    length: int
    policy: int = 0
    opponent: int = NO_OPPONENT
    opponent_version: int = -1


def wire_form(episodes: list[Episode]) -> list[tuple]:
    """Episodes as plain tuples of their fields, to cross a process boundary cheaply (see the module docstring)."""
    return [tuple(episode) for episode in episodes]


def episodes_from_event(records: list) -> list[Episode]:
    """Episodes again from their wire form (:func:`wire_form`), or from the plain sequences msgpack made of them on
    Dask's event log (a worker that retired in order reports its final statistics there)."""
    return [Episode(*record) for record in records]
