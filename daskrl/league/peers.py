"""A league of separate runs (``--league-peers``): each member is a run of its own, on workers of its own of one
cluster, and the members play one another through the run registry.

Every few seconds (the league's redraw) a member run tells the registry its seats: its member's name and role, the
parameter blocks of its current policy and snapshots (published over Dask comms too, so a peer on another host
reads them) and the versions its snapshots hold. It reads each peer's seats back, and where a peer's block changed
(the peer started, took a new snapshot block, or restarted its learner after a fault) every sampler of this run
follows the new block in that peer's slot; the samplers' team keeps the blocks, so a sampler recreated later
attaches them too. A peer that is not training on the cluster now (not started yet, still starting, stopping, or
gone) leaves its slots empty: the league draws no opponent from an empty slot, and the run trains on against the
players it has.
"""

from __future__ import annotations

from typing import Any

from daskrl.driver.loop.observers import Run
from daskrl.errors import ClusterAccessError
from daskrl.league.members import PeerSeats, Players
from daskrl.runtime.access.runs import run_params
from daskrl.runtime.actors.handles import call_each


class LeaguePeers:
    """See the module docstring: this run's seats out, the peers' seats in."""

    def __init__(self, players: Players) -> None:
        self.players = players
        self.present: dict[str, bool] = {}  # whether each peer was on the cluster at the last look

    def exchange(self, run: Run) -> None:
        """Tell the registry this run's seats; read every peer's, and follow the blocks that changed."""
        member = self.players.members[0]
        versions = run.book.learners[member.policy].get("snapshot_versions", [])
        seats = PeerSeats(member.name, member.role, tuple(run.fleet.teams.sources()), tuple(versions))
        if run.fleet.teams.params:  # none before the learners exist (the first draw)
            try:
                run.control.claim.tell_league(seats.record())
            except Exception as exc:  # the scheduler did not answer this time: the next redraw tells it
                run.incidents.note("league-seats-not-sent", exc)
        for peer in self.players.peers:
            self._follow(run, peer, self._seats_of(run, peer))

    def _seats_of(self, run: Run, peer: str) -> PeerSeats | None:
        """What ``peer`` last told the registry (None: it is not on the cluster, or has not told yet)."""
        try:
            record = run_params(run.client, peer).get("league")
        except ClusterAccessError:
            record = None
        there = record is not None
        if self.present.get(peer) != there:  # said once each time it comes or goes
            run.say(f"daskrl: league: run {peer!r} joined; its players are in the draw" if there else
                    f"daskrl: league: run {peer!r} (--league-peers) is not training on this cluster now (not "
                    "started, still starting, stopping or gone); its slots stay empty until it is")
        self.present[peer] = there
        return PeerSeats.from_record(record) if record is not None else None

    def _follow(self, run: Run, peer: str, seats: PeerSeats | None) -> None:
        """``peer``'s slots to ``seats``: every sampler reads a block that changed; a peer that left keeps no block
        (a sampler recreated later must not attach a segment its owner removed)."""
        self.players.seats[peer] = seats
        first = self.players.first_peer_slot + self.players.peers.index(peer) * (1 + self.players.peer_snapshots)
        blocks: list[dict[str, Any] | None] = list(seats.blocks) if seats is not None else []
        samplers = run.fleet.samplers
        for slot in range(1 + self.players.peer_snapshots):
            desc = blocks[slot] if slot < len(blocks) else None
            kept = first + slot - self.players.first_peer_slot
            if desc == samplers.peer_blocks[kept]:
                continue
            samplers.peer_blocks[kept] = desc  # before the calls: a worker recreated meanwhile attaches it
            if desc is not None:
                call_each(samplers.all(), "set_params", desc, first + slot, warn=run.warn)
