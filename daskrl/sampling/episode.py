"""The record of one finished episode, as a rollout worker reports it and the driver reads it.

It travels inside actor results (pickled: a rollout worker's ``collect`` and final ``stop``), never on the topic
bus, so it can be a class: every field has a name, and a reader never tells kinds of episodes apart by how many
numbers they carry. The one other way out, a retiring worker's last word on Dask's event log, turns records into
plain sequences of their fields; :func:`episodes_from_event` makes them records again where that is read. Being a
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


def episodes_from_event(records: list) -> list[Episode]:
    """The episodes of a rollout worker's last word that came through Dask's event log (a worker that retired in
    order reports its final statistics there: :mod:`daskrl.driver.departures`), where msgpack made each record a
    plain sequence of its five fields."""
    return [Episode(*record) for record in records]
