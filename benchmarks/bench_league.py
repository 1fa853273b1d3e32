"""Tic-tac-toe: a league's main agent against plain self-play's, after the same minutes of training.

Run:  python benchmarks/bench_league.py [--json] [--minutes 15] [--exploit-minutes 5] [--games 200] [--seed 0]

Two runs as a user types them, one after the other (the order alternates with ``--seed``), each ``--train-for-seconds
MINUTES*60 --train-for-env-steps 0`` on ``pettingzoo.classic.tictactoe.tictactoe:env``: ``--league`` (its defaults:
a main agent, a main exploiter and a league exploiter, 4 snapshots each) and ``--self-play-snapshots 4``. Each
run's main agent (policy 0's newest checkpoint) then plays, taking its most likely move:

- a perfect player (minimax, written here: it never loses, and picks at random among its best moves), ``--games``
  games in each seat: the main agent's losses should be 0;
- a uniformly random player (legal moves only), ``--games`` games, seats alternating: its win share should be at
  least 0.95.

Then a fresh exploiter trains ``--exploit-minutes`` against each frozen main agent (``--frozen-opponent``) and plays
it ``--games`` games, seats alternating, both sampling their moves as in training: its win share is how exploitable
that main agent is. Also printed: each training run's env steps/s (the league's within 15% of self-play's?) and the
samples its learners trained per env step (a league trains both sides of its members' games against each other),
and the fewest games the league's payoff table holds for a pair of its members. With ``--json``, one JSON object
last.
Nothing else may run meanwhile (2 cores).
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import os
import tempfile

import numpy as np
from common import stop_if_signalled

import daskrl
from daskrl.config import Config
from daskrl.envs.layouts.dict_obs import unpack
from daskrl.evaluation.loading import experiment_spaces, load_state, policy_model, read_config
from daskrl.evaluation.multi_agent_play import game_group, outcome, play_games
from daskrl.evaluation.players import PolicyPlayer, RandomPlayer

GAME = "pettingzoo.classic.tictactoe.tictactoe:env"


class SamplesTrained(daskrl.Observer):
    """The samples every learner of the run trained, as they last reported."""

    def on_stop(self, run) -> None:
        self.samples = sum(int(stats.get("samples_trained", 0)) for stats in run.book.learners)
ARMS = {"league": {"league": True}, "self-play": {"self_play_snapshots": 4}}
LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]


@functools.cache
def value(mine: int, theirs: int) -> int:
    """The game's value for the player to move (1 win, 0 draw, -1 loss with perfect play), boards as bit masks of
    the squares each side holds (square = the action that takes it)."""
    if any(all(theirs >> s & 1 for s in line) for line in LINES):
        return -1
    free = [s for s in range(9) if not (mine | theirs) >> s & 1]
    return max((-value(theirs, mine | 1 << s) for s in free), default=0)


class MinimaxPlayer:
    """A perfect tic-tac-toe player reading the board from the observation: plane 0 holds the mover's marks, plane
    1 the opponent's, row-major in the order of the actions."""

    name = "minimax"

    def __init__(self, layout, seed: int) -> None:
        self.keys, self.rng = layout.obs_keys, np.random.default_rng(seed)

    def begin(self, column: int) -> None:
        return None

    def act(self, obs: np.ndarray, columns: np.ndarray, actions: np.ndarray) -> None:
        for c in columns:
            board = unpack(obs[c][None], self.keys)["observation"][0].reshape(9, 2)
            mine, theirs = (int(sum(1 << s for s in range(9) if board[s, p] > 0.5)) for p in (0, 1))
            free = [s for s in range(9) if not (mine | theirs) >> s & 1]
            scores = [-value(theirs, mine | 1 << s) for s in free]
            actions[c] = int(self.rng.choice([s for s, v in zip(free, scores, strict=True) if v == max(scores)]))


def network_player(experiment_dir: str, policy: int, deterministic: bool, name: str) -> tuple[PolicyPlayer, object]:
    config = read_config(experiment_dir)
    spaces = experiment_spaces(config)
    model = policy_model(config, spaces, load_state(experiment_dir, config, "latest", policy)["model"], policy)
    return PolicyPlayer(name, model, spaces, deterministic), spaces


def results(me, other, spaces, games: int, seat: int | None, seed: int) -> dict[str, int]:
    """``me`` against ``other``: wins, draws and losses of ``me`` over ``games`` games (``seat`` fixed, or
    alternating)."""
    group = game_group(GAME, spaces, seed)
    try:
        def seats(game: int):
            mine = game % 2 if seat is None else seat
            return ([me, other] if mine == 0 else [other, me]), mine

        played = play_games(group, seats, games)
    finally:
        group.close()
    counts = {"won": 0, "drawn": 0, "lost": 0}
    for g in played:
        counts[outcome(g.returns, g.focus)] += 1
    return counts


def train(root: str, name: str, seconds: float, seed: int, **options) -> dict:
    config = Config.from_flat({"env": GAME, "train_for_seconds": seconds, "train_for_env_steps": 0, "seed": seed,
                               "train_dir": root, "dashboard_address": "", "experiment": name, **options})
    counter = SamplesTrained()
    summary = daskrl.train(config, observers=[counter])
    stop_if_signalled(summary)
    return {**summary, "samples_per_env_step": counter.samples / max(summary["env_steps"], 1)}


def main_agent(summary: dict) -> str:
    """The folder of the main agent's checkpoints (policy 0's)."""
    folder = os.path.join(summary["experiment_dir"], "checkpoints")
    return os.path.join(folder, "policy_0") if os.path.isdir(os.path.join(folder, "policy_0")) else folder


def least_played_pair(experiment_dir: str, members: list[str]) -> int:
    with open(os.path.join(experiment_dir, "payoff.csv"), newline="") as f:
        games = {(r["player"], r["opponent"]): int(r["games"]) for r in csv.DictReader(f)}
    return min(games.get((a, b), 0) for a in members for b in members if a != b)


def one_arm(root: str, arm: str, args: argparse.Namespace) -> dict:
    summary = train(root, arm.replace("-", "_"), args.minutes * 60, args.seed, **ARMS[arm])
    main, spaces = network_player(summary["experiment_dir"], 0, True, "main")
    row = {"arm": arm, "env_steps": summary["env_steps"], "mean_fps": round(summary["mean_fps"]),
           "samples_per_env_step": round(summary["samples_per_env_step"], 3)}
    perfect = MinimaxPlayer(spaces, args.seed)
    for seat in (0, 1):
        row[f"vs_minimax_seat{seat}"] = results(main, perfect, spaces, args.games, seat, args.seed + seat)
    group = game_group(GAME, spaces, 0)  # the random player's action spaces and masks
    try:
        row["vs_random"] = results(main, RandomPlayer(group.envs[0], spaces, args.seed), spaces, args.games, None,
                                   args.seed + 2)
    finally:
        group.close()
    if arm == "league":
        row["least_games_between_members"] = least_played_pair(summary["experiment_dir"], list(summary["league"]))
    row["main_dir"], row["experiment_dir"] = main_agent(summary), summary["experiment_dir"]
    return row


def exploit(root: str, row: dict, args: argparse.Namespace) -> dict:
    """A fresh exploiter against the arm's frozen main agent, then 200 games of the two, both sampling."""
    name = f"exploit_{row['arm'].replace('-', '_')}"
    summary = train(root, name, args.exploit_minutes * 60, args.seed, frozen_opponent=row["main_dir"])
    exploiter, spaces = network_player(summary["experiment_dir"], 0, False, "exploiter")
    main, _ = network_player(row["experiment_dir"], 0, False, "main")
    counts = results(exploiter, main, spaces, args.games, None, args.seed + 3)
    return {"exploiter_env_steps": summary["env_steps"], "exploiter_vs_main": counts,
            "exploiter_win_share": counts["won"] / args.games}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=15)
    parser.add_argument("--exploit-minutes", type=float, default=5)
    parser.add_argument("--games", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as root:
        order = list(ARMS) if args.seed % 2 == 0 else list(reversed(ARMS))
        for arm in order:
            rows.append(one_arm(root, arm, args))
        for row in rows:
            row.update(exploit(root, row, args))
            del row["main_dir"], row["experiment_dir"]
    for row in rows:
        print(f"{row['arm']:9s} | {row['env_steps']:,} env steps at {row['mean_fps']:,} frames/s, "
              f"{row['samples_per_env_step']:.2f} samples trained per env step | vs minimax, "
              f"losses first {row['vs_minimax_seat0']['lost']}/{args.games}, second "
              f"{row['vs_minimax_seat1']['lost']}/{args.games} | vs random, won {row['vs_random']['won']}/"
              f"{args.games} | a fresh exploiter won {row['exploiter_win_share']:.2f} of {args.games}"
              + (f" | fewest games between two members {row['least_games_between_members']:,}"
                 if "least_games_between_members" in row else ""), flush=True)
    fps = {row["arm"]: row["mean_fps"] for row in rows}
    print(f"league frames/s / self-play frames/s: {fps['league'] / fps['self-play']:.3f}")
    if args.json:
        print(json.dumps({"minutes": args.minutes, "exploit_minutes": args.exploit_minutes, "games": args.games,
                          "seed": args.seed, "rows": rows, "fps_ratio": fps["league"] / fps["self-play"]}))


if __name__ == "__main__":
    main()
