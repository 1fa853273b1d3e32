"""The runner's side of a league (``--league``): it fills the payoff table from every finished game, redraws each
member's opponents from it, adds a member's snapshot to the league when the member beats its opponents (an exploiter
then may start afresh, as AlphaStar's do: :mod:`.resets`), and writes
``payoff.csv``, ``league.csv`` and the dashboard's heat map.

It is an observer of the run's loop (:mod:`daskrl.driver.loop.observers`). The games come from the trained policies'
finished episodes, each naming its opponent and the version that opponent acted with; a game between two members
is reported by both and counted once, a member's game against itself not at all. Every :data:`REDRAW_S` seconds
the opponent weights (:mod:`.pfsp`) go to every rollout worker, whose envs draw from them as they begin episodes,
and are kept on the samplers, where a rollout worker created later starts (the first draw, from an empty table or
a resumed one, before any is created). A member run of a league of separate runs (``--league-peers``) exchanges its
seats with the other member runs at each redraw (:mod:`.peers`).
"""

from __future__ import annotations

import csv
import dataclasses
import os
import time
from collections import deque
from typing import Any

import numpy as np

from daskrl.driver.loop.observers import Observer, Run
from daskrl.driver.loop.steering import record_event
from daskrl.errors import ComponentError
from daskrl.league.members import Member, Player, Players, league_members
from daskrl.league.payoff import Payoff, outcome_of
from daskrl.league.peers import LeaguePeers
from daskrl.league.pfsp import opponent_weights
from daskrl.league.resets import starts_afresh
from daskrl.monitor.outputs.csv_log import CsvLog
from daskrl.protocol import LEAGUE_TOPIC
from daskrl.runtime.actors.handles import ComponentHandle, call_each
from daskrl.sampling.episode import NO_OPPONENT, Episode

#: seconds between two redraws of the opponent weights
REDRAW_S = 5.0
#: a member's games since its last snapshot that its win rate is judged on before it may add another one
SNAPSHOT_GAMES = 200
#: a change of any opponent weight below this is not sent to the rollout workers
REDRAW_TOLERANCE = 0.01
#: seconds a member's learner has to answer a reset (it does it between two training steps)
RESET_WAIT_S = 60.0


@dataclasses.dataclass
class PendingReset:
    """A member's learner asked to start afresh, and the answer to come (the snapshot's version)."""

    leader: ComponentHandle
    answer: Any  # the call's future (an ActorFuture)
    win_rate: float
    asked_at: float


class LeagueObserver(Observer):
    """See the module docstring."""

    def before_components(self, run: Run) -> None:
        """The league's members, its table (a resumed run's), and the first draw, which the rollout workers start
        with."""
        p = run.config.policies
        self.members = league_members(p)
        self.players = Players(self.members, p)
        self.peers = LeaguePeers(self.players) if p.league_peers else None
        self.payoff = Payoff.from_state(run.state.league)
        self.since_snapshot = [deque(maxlen=SNAPSHOT_GAMES) for _ in self.members]  # each member's outcomes
        self.weights: tuple[tuple[float, ...], ...] | None = None
        self.redrawn_at = -float("inf")
        self.rng = np.random.default_rng(run.config.run.seed)  # whether a league exploiter starts afresh
        self.resets: dict[int, PendingReset] = {}  # members whose learner was asked to start afresh, by policy
        self.league_csv = CsvLog(os.path.join(run.config.experiment_dir, "league.csv"), append=run.config.run.resume)
        run.state.episode_readers.append(self.take_episodes)
        roster = ", ".join(f"{m.name} (policy {m.policy})" for m in self.members)
        who = f"league of runs: this run is {roster}, beside the runs {', '.join(p.league_peers)}" if p.league_peers \
            else f"league of {len(self.members)} members: {roster}"
        run.say(f"daskrl: {who}; {p.self_play_snapshots} snapshots each; opponents by PFSP ({p.league_pfsp})"
                + (" (payoff table resumed)" if run.state.league else ""))
        self.redraw(run)

    def take_episodes(self, episodes: list[Episode]) -> None:
        """The trained policies' finished episodes (see RunState.episode_readers): the games into the table."""
        n = len(self.members)
        for e in episodes:
            both_members = e.opponent < n
            if e.opponent == NO_OPPONENT or e.opponent == e.policy or (both_members and e.opponent < e.policy):
                continue  # no game, a member against itself, or a game the other member's episode counts
            opponent = self.players.player(e.opponent, e.opponent_version)
            if opponent is None:
                continue  # a peer's slot that is empty now (the game began before its peer left)
            outcome = outcome_of(e.ret)
            self.payoff.add(self.members[e.policy].name, opponent.name, outcome, {opponent.name: opponent.member})
            self.since_snapshot[e.policy].append(outcome)
            if both_members:
                self.since_snapshot[e.opponent].append(1.0 - outcome)

    def on_poll(self, run: Run) -> None:
        if self.resets:
            self.finish_resets(run)
        if time.monotonic() - self.redrawn_at >= REDRAW_S:
            self.redraw(run)
            self.add_snapshots(run)

    def redraw(self, run: Run) -> None:
        """Each member's opponent weights from the table as it is now, sent where they changed."""
        self.redrawn_at = time.monotonic()
        p = run.config.policies
        if self.peers is not None:
            self.peers.exchange(run)
        roster = self.roster(run)
        if all("snapshot_versions" in run.book.learners[m.policy] for m in self.members):  # the roster is real now
            self.payoff.forget_recent({player.name for player in roster if player is not None})
        weights = opponent_weights(self.members, roster, self.payoff, p.league_pfsp, p.league_self_play)
        run.state.league = self.payoff.state()
        if self.weights is not None and np.abs(np.subtract(weights, self.weights)).max() < REDRAW_TOLERANCE:
            return
        self.weights = weights
        samplers = run.fleet.samplers  # kept there before the calls: a worker recreated meanwhile starts there
        samplers.course = dataclasses.replace(samplers.course, opponent_weights=weights)
        call_each(samplers.rollout, "draw_opponents_by", weights, warn=run.warn)

    def roster(self, run: Run) -> list[Player | None]:
        """Every acting policy's player now (the snapshot blocks' versions as the learners last reported; None: a
        peer's slot that is empty)."""
        return self.players.roster([run.book.learners[m.policy].get("snapshot_versions", []) for m in self.members])

    def add_snapshots(self, run: Run) -> None:
        """A member that won ``--league-snapshot-win-rate`` of its recent games (a full window since its last
        snapshot) adds its next version to the league's players."""
        threshold = run.config.policies.league_snapshot_win_rate
        for member, recent in zip(self.members, self.since_snapshot, strict=True):
            if member.policy in self.resets:  # starting afresh: its recent games are the old weights'
                recent.clear()
                continue
            if len(recent) < SNAPSHOT_GAMES or (rate := sum(recent) / len(recent)) < threshold:
                continue
            recent.clear()
            if run.config.policies.league_exploiter_resets and starts_afresh(member, self.roster(run), self.payoff,
                                                                             threshold, self.rng):
                self.start_afresh(run, member, rate)
                continue
            # a learner lost at this moment is a warning: once restarted it takes snapshots on its schedule again
            call_each([run.fleet.teams.leaders[member.policy]], "take_snapshot", warn=run.warn)
            run.say(f"daskrl: league: {member.name} won {rate:.0%} of its last {SNAPSHOT_GAMES} games; its next "
                    "version joins the league as a snapshot")
            record_event(run, "league_snapshot", {"member": member.name, "win_rate": rate})

    def start_afresh(self, run: Run, member: Member, rate: float) -> None:
        """Ask ``member``'s learner to keep what it is now as a snapshot and train on from fresh weights
        (``--league-exploiter-resets``); its answer is read at a later poll (:meth:`finish_resets`): the learner
        does it between two training steps, and the run's loop does not wait for that."""
        leader = run.fleet.teams.leaders[member.policy]
        try:
            self.resets[member.policy] = PendingReset(leader, leader.send("snapshot_and_start_afresh"), rate,
                                                      time.monotonic())
        except ComponentError as exc:  # lost at this moment: the recovery restarts it, and it wins its way back here
            run.warn(f"{leader.name} did not start afresh: {exc}")

    def finish_resets(self, run: Run) -> None:
        """The resets the learners have done since the last poll: the snapshot takes the member's rating and the
        member starts over in the table. One that no answer came for in :data:`RESET_WAIT_S` is given up."""
        for policy, reset in list(self.resets.items()):
            member = self.members[policy]
            if not reset.answer.done() and time.monotonic() - reset.asked_at < RESET_WAIT_S:
                continue
            del self.resets[policy]
            problem = None if reset.answer.done() else f"no answer in {RESET_WAIT_S:.0f} s"
            if problem is None:
                try:
                    version = reset.leader.wait("snapshot_and_start_afresh", reset.answer)
                except ComponentError as exc:  # lost meanwhile (recovered from its checkpoint)
                    problem = str(exc)
            if problem is not None:
                run.warn(f"{reset.leader.name} did not start afresh ({problem}); {member.name} goes on in the table "
                         "as it was")
                continue
            snapshot = f"{member.name}@{version}"
            self.payoff.start_afresh(member.name, snapshot)
            run.say(f"daskrl: league: {member.name} won {reset.win_rate:.0%} of its last {SNAPSHOT_GAMES} games; it "
                    f"joins the league as {snapshot} and trains on from fresh weights")
            record_event(run, "league_reset", {"member": member.name, "win_rate": reset.win_rate,
                                               "snapshot": snapshot})

    def on_report(self, run: Run, row: dict[str, Any]) -> None:
        """``payoff.csv`` anew (the whole table), a row per current player in ``league.csv`` (its Elo rating and
        games), and each member's rating in TensorBoard."""
        table = self.keep(run)
        members: dict[str, Player] = {}  # each current player (once, in the acting order)
        for player in self.roster(run):
            if player is not None:
                members.setdefault(player.name, player)
        # a snapshot not rated yet starts at its member's rating (first seen here, before its first game)
        elo = {name: round(self.payoff.rating(name, player.member), 1) for name, player in members.items()}
        run.log_event(LEAGUE_TOPIC, {
            "run": run.config.run.experiment, "env_steps": row["env_steps"], "players": list(members),
            "payoff": [r for r in table if r["player"] in members and r["opponent"] in members], "elo": elo,
            "peers": list(run.config.policies.league_peers)})
        games: dict[str, int] = {}
        for (player, _), count in self.payoff.counts.items():
            games[player] = games.get(player, 0) + sum(count)
        for name, player in members.items():
            self.league_csv.write({"time_s": row["time_s"], "env_steps": row["env_steps"], "player": name,
                                   "member": player.member, "role": player.role.value, "elo": elo[name],
                                   "games": games.get(name, 0)})
        for member in self.members:
            run.outputs.tb_log.writer.add_scalar(f"league/elo/{member.name}", self.payoff.rating(member.name),
                                                 int(row["env_steps"]))

    def keep(self, run: Run) -> list[dict[str, Any]]:
        """The table as it is now into ``payoff.csv`` and into the run's state, which the next checkpoint keeps;
        returns its rows."""
        run.state.league = self.payoff.state()
        table = self.payoff.rows()
        write_table(os.path.join(run.config.experiment_dir, "payoff.csv"), table)
        return table

    def on_stop(self, run: Run) -> None:
        """The games that ended since the last report into the table that the final checkpoint keeps."""
        self.keep(run)
        self.league_csv.close()

    def summary(self) -> dict[str, Any]:
        return {"league": {m.name: {"role": m.role.value, "elo": round(self.payoff.rating(m.name), 1)}
                           for m in getattr(self, "members", [])}}


def write_table(path: str, rows: list[dict[str, Any]]) -> None:
    """``rows`` as a CSV file that replaces ``path`` whole (a reader never sees half of it)."""
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        if rows:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    os.replace(tmp, path)
