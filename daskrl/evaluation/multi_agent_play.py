"""Games of a multi-agent env played in this process: ``daskrl enjoy`` on a PettingZoo game, and the evaluation
episodes and videos of such a run while it trains.

One env, stepped by :class:`~daskrl.envs.multi_agent.MultiAgentGroup`, the rollout workers' own group: turns,
rewards credited between turns, Dict observations and agents of different spaces work here exactly as they do in
training. Before each game every seat (agent) gets a player (:mod:`.players`); a game ends when its env starts the
next one (the group resets an env whose agents are all done), and each agent's return is the sum of its reward
rows over the game: its episode return, the rewards the other players' moves gave it included.

Who won a two-player game: the seat with the higher return wins, equal returns are a draw. In a zero-sum game that
is the sign of a seat's own return (tic-tac-toe's +1, 0, -1); wins are counted only where every game played was
zero-sum (its two returns sum to 0), since a cooperative or general-sum game has no winner.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.envs.multi_agent import MultiAgentGroup
from daskrl.envs.registry import make_env
from daskrl.evaluation.players import Player

#: a game's players, seat by seat, and the seat of the player being measured (None: every seat counts)
Seats = tuple[Sequence[Player], int | None]


@dataclass(frozen=True)
class Game:
    """One game: each agent's return (in ``possible_agents`` order), its length in env steps (moves, in a
    turn-based game), each agent's own acting steps, who sat in each seat and which seat the measured player had
    (None: every seat counts)."""

    returns: tuple[float, ...]
    length: int
    agent_steps: tuple[int, ...]
    players: tuple[str, ...]
    focus: int | None = None


def game_group(spec: str, layout: EnvSpaces, seed: int, env_kwargs: dict[str, Any] | None = None,
               render_mode: str | None = None) -> MultiAgentGroup:
    """One env of ``spec`` in a group laid out as the run's slots (``layout``: the probed spaces); ``rgb_array``
    builds it as a video's env (the same check and message as single-agent videos)."""
    if render_mode == "rgb_array":
        from daskrl.monitor.outputs.video import make_render_env

        env = make_render_env(spec, seed=seed, env_kwargs=env_kwargs)
    else:
        env = make_env(spec, seed=seed, env_kwargs=env_kwargs, render_mode=render_mode)
    return MultiAgentGroup([env], layout)


def play_games(group: MultiAgentGroup, seats: Callable[[int], Seats], games: int,
               frames: list[np.ndarray] | None = None, stop: Callable[[], bool] | None = None,
               max_steps: int = 100_000) -> list[Game]:
    """Play ``games`` whole games on ``group`` (one env), each seat by the player ``seats(game)`` puts there; with
    ``frames``, append what the env renders before each step; ``stop`` (asked every step) ends early with the games
    finished so far; a game longer than ``max_steps`` is cut there (its returns so far)."""
    layout = group.spaces
    n = group.num_envs
    obs = np.zeros((n, *layout.obs_shape), np.dtype(layout.obs_dtype))
    actions = np.zeros((n, *layout.action_shape), np.dtype(layout.action_dtype))
    reward, terminated, truncated = np.zeros(n, np.float32), np.zeros(n, bool), np.zeros(n, bool)
    group.reset(obs)
    group.pop_new_episodes()
    played: list[Game] = []
    while len(played) < games:
        players, focus = seats(len(played))
        for column, player in enumerate(players):
            player.begin(column)
        totals, steps, acted = np.zeros(n), 0, np.zeros(n, np.int64)
        while True:
            if stop is not None and stop():
                return played
            if frames is not None:
                frames.append(group.envs[0].render())
            acted += group.active
            for player, columns in _by_player(players, group.active):
                player.act(obs, columns, actions)
            group.step(actions, obs, reward, terminated, truncated)
            totals += reward
            steps += 1
            _drain(group)
            if group.pop_new_episodes():  # the env reset: this game is over
                break
            if steps >= max_steps:
                group.reset(obs)
                group.pop_new_episodes()
                break
        played.append(Game(tuple(float(r) for r in totals), steps, tuple(int(a) for a in acted),
                           tuple(p.name for p in players), focus))
    return played


def _by_player(players: Sequence[Player], active: np.ndarray) -> list[tuple[Player, np.ndarray]]:
    """The acting columns of each player present (one forward pass for the seats one network holds)."""
    out: dict[int, tuple[Player, list[int]]] = {}
    for column in np.flatnonzero(active):
        player = players[column]
        out.setdefault(id(player), (player, []))[1].append(int(column))
    return [(player, np.asarray(columns)) for player, columns in out.values()]


def _drain(group: MultiAgentGroup) -> None:
    """Drop the group's own episode records (the rows give the returns here), so they do not pile up."""
    group.pop_episode_stats()
    group.pop_episode_extras()
    group.pop_truncations()


def outcome(returns: Sequence[float], seat: int) -> str:
    """'won', 'drawn' or 'lost' for ``seat`` of a two-player game (see the module docstring)."""
    mine, theirs = returns[seat], returns[1 - seat]
    return "won" if mine > theirs else "drawn" if mine == theirs else "lost"


def zero_sum(games: Sequence[Game]) -> bool:
    """Whether every one of these two-player games' returns summed to zero (to float precision)."""
    return bool(games) and all(len(g.returns) == 2 and abs(g.returns[0] + g.returns[1]) <= 1e-6 * max(
        1.0, abs(g.returns[0]), abs(g.returns[1])) for g in games)


def game_stats(games: Sequence[Game], agent_ids: Sequence[str]) -> dict[str, Any]:
    """Each agent's mean return (``agents``), the games' mean length and, for a zero-sum two-player game, each
    seat's games, wins, draws and losses (``seats``: the measured player's, where games have one; else each seat's
    occupant's). ``return_mean`` and ``agent_length_mean`` are over every agent's episodes (the mean per-agent
    return and own steps, as training logs them)."""
    per_agent = np.array([g.returns for g in games], np.float64).reshape(len(games), len(agent_ids))
    out: dict[str, Any] = {
        "episodes": len(games), "return_mean": float(per_agent.mean()) if games else float("nan"),
        "return_std": float(per_agent.std()) if games else float("nan"),
        "length_mean": float(np.mean([g.length for g in games])) if games else float("nan"),
        "agent_length_mean": float(np.mean([g.agent_steps for g in games])) if games else float("nan"),
        "agents": {a: {"return_mean": float(per_agent[:, k].mean()) if games else float("nan"),
                       "return_std": float(per_agent[:, k].std()) if games else float("nan")}
                   for k, a in enumerate(agent_ids)},
        "zero_sum": len(agent_ids) == 2 and zero_sum(games), "seats": {}}
    if out["zero_sum"]:
        for seat, agent in enumerate(agent_ids):
            mine = [g for g in games if g.focus is None or g.focus == seat]
            counts = {k: 0 for k in ("won", "drawn", "lost")}
            for g in mine:
                counts[outcome(g.returns, seat)] += 1
            own = [g.returns[seat] for g in mine]
            out["seats"][agent] = {"games": len(mine), **counts,
                                   "return_mean": float(np.mean(own)) if own else float("nan")}
    return out
