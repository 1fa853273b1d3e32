"""``daskrl enjoy`` on a multi-agent experiment: who sits in each seat, loaded from the experiment's checkpoints.

Three ways to seat the players:

- by default, each agent is played by the policy the run's ``--policy-mapping`` gives it (each trained policy from
  its own checkpoint; with self-play, the frozen snapshots from policy 0's checkpoint), game by game as in training;
- ``--policy K``: policy K in every seat;
- ``--opponent random|policy:J|snapshot:V`` (two-player games): policy K (``--policy``, 0 by default) against that
  opponent, in the seat ``--seat`` names (an agent id or its position) or, by default, in each seat in turn, so
  both seats are measured.

The games are played by :mod:`.multi_agent_play`; :func:`describe` turns the result into the lines enjoy prints.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from daskrl.config import Config
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.envs.multi_agent import MultiAgentGroup
from daskrl.errors import ConfigError
from daskrl.evaluation.loading import load_state, policy_model
from daskrl.evaluation.multi_agent_play import Seats, game_group, game_stats, play_games
from daskrl.evaluation.players import Player, PolicyPlayer, RandomPlayer
from daskrl.sampling.policies.policy_map import PolicyMap, mapping_of, resolve_mapping, snapshot_owners

#: each game's seats (the players, seat by seat, and the measured player's seat), by game number
SeatsFn = Callable[[int], Seats]


def parse_opponent(text: str) -> tuple[str, int]:
    """``random``, ``policy:J`` or ``snapshot:V`` -> (kind, number; 0 for random)."""
    kind, _, number = text.partition(":")
    if text == "random":
        return "random", 0
    if kind in ("policy", "snapshot") and number.strip().isdigit():
        return kind, int(number)
    raise ConfigError([f"--opponent {text!r}: name one as random, policy:J (trained policy J) or snapshot:V (the "
                       "self-play snapshot that holds policy version V, as selfplay.csv names it)"])


def seat_index(seat: str, agent_ids: tuple[str, ...]) -> int:
    """The position of ``--seat`` (an agent id, or its position 0, 1, ...) among the agents."""
    if seat in agent_ids:
        return agent_ids.index(seat)
    if seat.isdigit() and int(seat) < len(agent_ids):
        return int(seat)
    raise ConfigError([f"--seat {seat!r}: this game's seats are {', '.join(agent_ids)} (or 0..{len(agent_ids) - 1})"])


class Loader:
    """The players an experiment's checkpoints hold (``which``: 'latest', 'best' or a file), each built once."""

    def __init__(self, experiment_dir: str, config: Config, spaces: EnvSpaces, which: str,
                 deterministic: bool) -> None:
        self.dir, self.config, self.spaces, self.which = experiment_dir, config, spaces, which
        self.deterministic = deterministic
        self.states: dict[int, dict[str, Any]] = {}
        self.players: dict[tuple[str, int], Player] = {}

    def state(self, policy: int) -> dict[str, Any]:
        if policy not in self.states:
            self.states[policy] = load_state(self.dir, self.config, self.which, policy)
        return self.states[policy]

    def policy(self, k: int) -> Player:
        if ("policy", k) not in self.players:
            model = policy_model(self.config, self.spaces, self.state(k)["model"], k)
            self.players["policy", k] = PolicyPlayer(f"policy {k}", model, self.spaces, self.deterministic)
        return self.players["policy", k]

    def saved_snapshots(self) -> list[tuple[int, int, dict]]:
        """Every self-play snapshot the checkpoints hold, as the acting policies number them: ``(policy, version,
        weights)``, policy 0's (or with a league each member's in turn)."""
        out = []
        for policy in dict.fromkeys(snapshot_owners(self.config.policies)):
            saved = self.state(policy).get("self_play_snapshots") or {}
            out += [(policy, int(v), w) for v, w in zip(saved.get("versions", []), saved.get("weights", []),
                                                       strict=True)]
        return out

    def snapshot(self, j: int | None = None, version: int | None = None) -> Player:
        """Self-play snapshot ``j`` (as the acting policies number them), or policy 0's that holds policy version
        ``version``."""
        saved = self.saved_snapshots()
        if not saved:
            raise ConfigError([f"experiment {self.dir!r} has no self-play snapshots in its {self.which} checkpoint "
                               "(trained without --self-play-snapshots, or before daskrl saved them): seat random "
                               "or a trained policy instead (--opponent random, --opponent policy:0)"])
        if version is not None:
            versions = [v for policy, v, _ in saved if policy == 0]
            if version not in versions:
                raise ConfigError([f"--opponent snapshot:{version}: the {self.which} checkpoint holds the snapshots "
                                   f"of versions {', '.join(map(str, versions))}"])
            j = versions.index(version)
        if ("snapshot", j) not in self.players:
            policy, held, weights = saved[j]
            model = policy_model(self.config, self.spaces, weights, self.config.policies.num_policies + j)
            owner = f" of policy {policy}" if policy else ""
            self.players["snapshot", j] = PolicyPlayer(f"snapshot{owner} of version {held}", model, self.spaces,
                                                       self.deterministic)
        return self.players["snapshot", j]

    def acting(self, k: int) -> Player:
        """Acting policy ``k`` as the mapping names it: a trained one, then the self-play snapshots."""
        n = self.config.policies.num_policies
        return self.policy(k) if k < n else self.snapshot(j=k - n)


def mapped_seats(loader: Loader) -> SeatsFn:
    """Seats as the run's mapping gives them, game by game (one env: its games are episodes 0, 1, 2, ...)."""
    p, ids = loader.config.policies, loader.spaces.agent_ids
    pmap = PolicyMap(mapping_of(p), p.num_policies, ids, [0], 1, len(snapshot_owners(p)))

    def seats(game: int) -> Seats:
        if game:
            pmap.episodes_began([0])
        return [loader.acting(int(k)) for k in pmap.column_policy], None

    return seats


def opponent_seats(loader: Loader, policy: int, opponent: str, seat: str | None, group: MultiAgentGroup,
                   seed: int) -> SeatsFn:
    """Policy ``policy`` against ``opponent`` in a two-player game, in seat ``seat`` or each seat in turn."""
    spaces = loader.spaces
    if spaces.num_agents != 2:
        raise ConfigError([f"--opponent seats one player against another in a two-player game; "
                           f"{loader.config.env.env!r} has {spaces.num_agents} agents: leave --opponent (and --seat) "
                           "out, and each agent plays by the run's --policy-mapping (or --policy K: policy K in "
                           "every seat)"])
    if spaces.agent_spaces:
        raise ConfigError([f"--opponent needs a game whose two seats share their spaces; {loader.config.env.env!r}'s "
                           "agents differ: leave --opponent out (each agent plays by the run's --policy-mapping)"])
    kind, number = parse_opponent(opponent)
    trained = loader.config.policies.num_policies
    if kind == "policy" and number >= trained:
        raise ConfigError([f"--opponent {opponent}: the experiment trained {trained} "
                           f"polic{'y' if trained == 1 else 'ies'} (policy:0..policy:{trained - 1})"])
    me = loader.policy(policy)
    other = RandomPlayer(group.envs[0], spaces, seed) if kind == "random" else \
        loader.policy(number) if kind == "policy" else loader.snapshot(version=number)
    fixed = None if seat is None else seat_index(seat, spaces.agent_ids)

    def seats(game: int) -> Seats:
        mine = game % 2 if fixed is None else fixed
        return ([me, other] if mine == 0 else [other, me]), mine

    return seats


def every_seat(loader: Loader, policy: int) -> SeatsFn:
    """Policy ``policy`` in every seat (it must fit every agent's spaces)."""
    spaces = loader.spaces
    if spaces.agent_spaces:  # set only where the agents' spaces differ
        raise ConfigError([f"--policy {policy} in every seat: {loader.config.env.env!r}'s agents have different "
                           "spaces, which one network cannot fit; leave --policy out (each agent plays by the run's "
                           "--policy-mapping)"])
    me = loader.policy(policy)
    return lambda game: ([me] * spaces.num_agents, None)


def enjoy_games(experiment_dir: str, config: Config, spaces: EnvSpaces, episodes: int, which: str = "latest",
                render: bool = False, deterministic: bool = False, seed: int = 12345, max_steps: int = 100_000,
                video: str | None = None, policy: int | None = None, opponent: str | None = None,
                seat: str | None = None) -> dict[str, Any]:
    """Play ``episodes`` games of a multi-agent experiment's env, seated as the module docstring says; with
    ``video``, record them all to that .mp4 file. Returns :func:`game_stats` and what was played."""
    if seat is not None and opponent is None:
        raise ConfigError(["--seat places the policy that plays against --opponent; give --opponent too"])
    if opponent is not None:
        parse_opponent(opponent)  # a bad name is refused before any env or checkpoint is opened
    loader = Loader(experiment_dir, config, spaces, which, deterministic)
    e = config.env
    group = game_group(e.env, spaces, seed, e.env_kwargs, "rgb_array" if video else "human" if render else None)
    frames: list[np.ndarray] | None = [] if video else None
    try:
        if opponent is not None:
            seats, who = opponent_seats(loader, policy or 0, opponent, seat, group, seed), \
                f"policy {policy or 0} against {opponent}"
        elif policy is not None:
            seats, who = every_seat(loader, policy), f"policy {policy} in every seat"
        else:
            kind, _ = resolve_mapping(mapping_of(config.policies), config.policies.num_policies,
                                      config.policies.self_play_snapshots)
            seats, who = mapped_seats(loader), f"each agent by the run's policy mapping ({kind})"
        games = play_games(group, seats, episodes, frames, max_steps=max_steps)
        if video:
            from daskrl.monitor.outputs.video import video_fps, write_video

            write_video(video, frames, video_fps(group.envs[0]))
    finally:
        group.close()
    state = loader.state(policy or 0)
    measured = f"policy {policy or 0}" if opponent is not None else None
    return {**game_stats(games, spaces.agent_ids), "multi_agent": True, "who": who, "measured": measured,
            "games": games, "returns": [list(g.returns) for g in games],
            "env_steps_trained": int(state.get("env_steps", 0)), "checkpoint": which, "video": video,
            "video_frames": len(frames or [])}


def describe(result: dict[str, Any]) -> list[str]:
    """The lines ``daskrl enjoy`` prints for a multi-agent result."""
    agents = ", ".join(f"{a} {s['return_mean']:.2f} ± {s['return_std']:.2f}" for a, s in result["agents"].items())
    lines = [f"{_games(result['episodes'])}, {result['who']} (policy trained for {result['env_steps_trained']:,} env "
             f"steps, {result['checkpoint']} checkpoint); mean length {result['length_mean']:.1f} steps",
             f"return per agent: {agents}"]
    measured = result["measured"]
    for agent, s in result["seats"].items():
        if not s["games"]:  # --seat: the measured policy never sat here
            continue
        who = f"{measured} in seat {agent}" if measured else f"seat {agent}"
        lines.append(f"{who}: {_games(s['games'])}, {s['won']} won, {s['drawn']} drawn, {s['lost']} lost "
                     f"(return {s['return_mean']:.2f})")
    if len(result["agents"]) == 2 and not result["zero_sum"] and result["episodes"]:
        lines.append("no wins counted: the two returns of some games do not sum to zero (not a zero-sum game)")
    return lines


def _games(n: int) -> str:
    return f"{n} game{'' if n == 1 else 's'}"
