"""Self-play on tic-tac-toe (PettingZoo's classic game): one policy learns against frozen past versions of itself.

    pip install 'daskrl[multiagent]'
    python examples/self_play.py [--seconds 90] [--snapshots 4] [--snapshot-every 25]

Policy 0 plays one seat of every game (the seats alternate between games); the other seat is played by one of
``--snapshots`` frozen copies of policy 0, taken every ``--snapshot-every`` policy versions and refreshed in turn
(the oldest goes). ``selfplay.csv`` in the experiment counts policy 0's wins, draws and losses against each opponent
at each report; an opponent is named by the policy version it holds, so one version is one fixed player. The
script prints, for each such opponent, policy 0's win rate when it first met it and when it last did (it rises while
the opponent stays frozen), then plays 300 games per seat against a uniformly random player with the final policy.
"""

from __future__ import annotations

import argparse
import csv
import os

import numpy as np
import torch

from daskrl import Config, train

GAME = "pettingzoo.classic.tictactoe.tictactoe:env"


def win_rates_by_opponent(experiment_dir: str) -> list[tuple[int, int, float, float, int]]:
    """(opponent version, reports, first win rate, last win rate, games) per frozen opponent met in 2+ reports."""
    with open(os.path.join(experiment_dir, "selfplay.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    by_version: dict[int, list[dict]] = {}
    for row in rows:
        by_version.setdefault(int(row["opponent_version"]), []).append(row)
    return [(version, len(met), float(met[0]["win_rate"]), float(met[-1]["win_rate"]),
             sum(int(r["games"]) for r in met)) for version, met in sorted(by_version.items()) if len(met) >= 2]


def against_random(experiment_dir: str, games: int = 300) -> dict[str, tuple[int, int, int]]:
    """The final policy's (wins, draws, losses) against a random legal player, in each seat."""
    from pettingzoo.classic.tictactoe import tictactoe

    from daskrl.envs import probe_env
    from daskrl.envs.layouts.dict_obs import pack_into
    from daskrl.learning.checkpoints import CheckpointStore
    from daskrl.models.actor_critic import build_model

    state = CheckpointStore(os.path.join(experiment_dir, "checkpoints")).load("latest")
    spaces = probe_env(GAME)
    model = build_model(spaces, Config.from_json(state["config"]).model, 0)
    model.load_state_dict(state["model"])
    model.eval()
    record = np.zeros(spaces.obs_shape, np.dtype(spaces.obs_dtype))  # the packed Dict record a slot holds
    rng = np.random.default_rng(0)
    out = {}
    for seat in (0, 1):
        results = [0, 0, 0]
        for game in range(games):
            env = tictactoe.env()
            env.reset(seed=game)
            me = env.possible_agents[seat]
            for agent in env.agent_iter():
                obs, reward, terminated, truncated, _ = env.last()
                if terminated or truncated:
                    if agent == me:
                        results[0 if reward > 0 else 1 if reward == 0 else 2] += 1
                    env.step(None)
                    continue
                if agent == me:
                    pack_into(record, obs, spaces.obs_keys)
                    with torch.no_grad():
                        action = int(model.act(record[None], state=None)[0][0])
                else:
                    action = int(rng.choice(np.flatnonzero(obs["action_mask"])))
                env.step(action)
        out["first" if seat == 0 else "second"] = tuple(results)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=90.0)
    parser.add_argument("--snapshots", type=int, default=4)
    parser.add_argument("--snapshot-every", type=int, default=25)
    parser.add_argument("--train-dir", default="train_dir")
    parser.add_argument("--experiment", default="self_play_tictactoe")
    args = parser.parse_args()
    config = Config().replace(env=GAME, self_play_snapshots=args.snapshots,
                              self_play_snapshot_every=args.snapshot_every, entropy_coef=0.01,
                              train_for_seconds=args.seconds, train_for_env_steps=0, train_dir=args.train_dir,
                              experiment=args.experiment, overwrite=True)
    train(config)
    print("\npolicy 0's win rate against each frozen snapshot, when it first and last met it:")
    print("| snapshot of version | reports | first | last | games |")
    print("|---|---|---|---|---|")
    for version, reports, first, last, games in win_rates_by_opponent(config.experiment_dir):
        print(f"| {version} | {reports} | {first:.2f} | {last:.2f} | {games:,} |")
    for seat, (won, drew, lost) in against_random(config.experiment_dir).items():
        print(f"against a random player, moving {seat}: {won} won, {drew} drawn, {lost} lost")


if __name__ == "__main__":
    main()
