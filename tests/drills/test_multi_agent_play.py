"""Playing multi-agent envs outside training: ``daskrl enjoy`` seating trained policies, self-play snapshots and a
random player (daskrl/evaluation/multi_agent_enjoy.py), the playing loop itself (multi_agent_play.py), and
evaluation games and videos while such a run trains (multi_agent_eval.py)."""

from __future__ import annotations

import csv
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from daskrl.cli import main
from daskrl.config import Config
from daskrl.envs import probe_env
from daskrl.evaluation.multi_agent_play import game_group, game_stats, play_games
from daskrl.evaluation.players import PolicyPlayer, RandomPlayer
from daskrl.learning.checkpoints import CheckpointStore
from daskrl.models.actor_critic import build_model

from ..helpers import slow

REPO = str(Path(__file__).resolve().parents[2])
GAME = "daskrl.testing.environments.envs:race_to_ten"  # zero-sum, two players, renders rgb_array without pygame
EPISODES = 12


def has_video() -> bool:
    try:
        import imageio_ffmpeg  # noqa: F401
    except ImportError:
        return False
    return True


def frame_count(path) -> int:
    import imageio.v2 as imageio

    with imageio.get_reader(str(path), format="FFMPEG") as reader:
        return sum(1 for _ in reader)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Race to ten, briefly trained with two self-play snapshots (refreshed every 2 versions, so the checkpoint's
    are past versions), evaluating every 1,000 env steps and, with the video extra, recording every 3,000. 24,000
    env steps (1-2 s): an evaluation's result reaches the CSV in the next report after it ends, and 8,000 steps took
    0.5 s with the faster learner, sometimes one report and no evaluation logged."""
    from daskrl import train

    tmp = tmp_path_factory.mktemp("ma_play")
    config = Config().replace(env=GAME, train_dir=str(tmp), experiment="race", dashboard_address="", num_workers=1,
                              num_envs_per_worker=8, rollout=16, batch_size=128, self_play_snapshots=2,
                              self_play_snapshot_every=2, train_for_env_steps=24_000, train_for_seconds=120,
                              report_interval=0.5, eval_interval_env_steps=1_000, eval_episodes=10,
                              save_video_every_env_steps=3_000 if has_video() else 0)
    summary = train(config)
    with open(tmp / "race" / "metrics.csv", newline="") as f:
        rows = [{k: float(v) if v not in ("", "nan") else math.nan for k, v in r.items()} for r in csv.DictReader(f)]
    state = CheckpointStore(tmp / "race" / "checkpoints").load("latest")
    return {"summary": summary, "rows": rows, "dir": tmp / "race", "train_dir": tmp,
            "snapshot_versions": [int(v) for v in state["self_play_snapshots"]["versions"]]}


# ---- the playing loop, without training ----


def test_a_parallel_games_agents_that_leave_early_get_their_exact_returns():
    """staggered: agent k acts lengths[k] steps and leaves (the env raises for an action of an agent not there);
    its return is known exactly."""
    layout = probe_env("daskrl.testing.environments.envs:staggered")
    group = game_group("daskrl.testing.environments.envs:staggered", layout, seed=1)
    player = RandomPlayer(group.envs[0], layout, seed=1)
    games = play_games(group, lambda game: ([player] * 3, None), 3)
    assert [(g.returns, g.length, g.agent_steps) for g in games] == [((203.0, 606.0, 1210.0), 4, (2, 3, 4))] * 3
    stats = game_stats(games, layout.agent_ids)
    assert stats["agents"]["a1"]["return_mean"] == 606.0 and stats["seats"] == {} and not stats["zero_sum"]


def test_a_random_player_and_a_masked_network_play_only_legal_tictactoe_moves():
    """tic-tac-toe's raw env asserts on an illegal move: 40 whole games are legal moves only, both from the random
    player (which reads the action mask from the packed Dict record) and from an untrained network."""
    pytest.importorskip("pettingzoo", reason="the multiagent extra (pip install 'daskrl[multiagent]') is not installed")
    spec = "pettingzoo.classic.tictactoe.tictactoe:raw_env"
    layout = probe_env(spec)
    group = game_group(spec, layout, seed=3)
    rand = RandomPlayer(group.envs[0], layout, seed=3)
    net = PolicyPlayer("untrained", build_model(layout, Config().model, 0), layout, deterministic=False)
    games = play_games(group, lambda game: (([net, rand] if game % 2 else [rand, net]), 1 - game % 2), 40)
    assert all(5 <= g.length <= 9 for g in games)
    stats = game_stats(games, layout.agent_ids)
    assert stats["zero_sum"] and {a: s["games"] for a, s in stats["seats"].items()} == {"player_1": 20, "player_2": 20}
    for seat in stats["seats"].values():
        assert seat["won"] + seat["drawn"] + seat["lost"] == seat["games"]


@slow("trains PettingZoo's tic-tac-toe briefly, then daskrl enjoy as a command")
def test_enjoy_plays_a_pettingzoo_game_against_a_random_opponent(tmp_path):
    """The command a user types on a real PettingZoo game (tic-tac-toe, whose raw env refuses an illegal move: the
    action mask is honoured by both players): each seat's wins, draws and losses, summing to its games."""
    pytest.importorskip("pettingzoo", reason="the multiagent extra (pip install 'daskrl[multiagent]') is not installed")
    from daskrl import train

    config = Config().replace(env="pettingzoo.classic.tictactoe.tictactoe:raw_env", train_dir=str(tmp_path),
                              experiment="ttt", dashboard_address="", num_workers=1, num_envs_per_worker=8,
                              rollout=16, batch_size=128, train_for_env_steps=3_000, train_for_seconds=60,
                              report_interval=0.5)
    train(config)
    done = subprocess.run([sys.executable, "-m", "daskrl", "enjoy", "--train-dir", str(tmp_path), "--experiment",
                           "ttt", "--opponent", "random", "--episodes", "20"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": REPO})
    assert done.returncode == 0, done.stderr
    seats = re.findall(r"policy 0 in seat (\w+): (\d+) games, (\d+) won, (\d+) drawn, (\d+) lost", done.stdout)
    assert [s[0] for s in seats] == ["player_1", "player_2"], done.stdout
    counts = [tuple(map(int, s[1:])) for s in seats]
    assert [games for games, *_ in counts] == [10, 10] and all(g == w + d + lo for g, w, d, lo in counts), done.stdout


def test_a_general_sum_game_counts_no_wins():
    layout = probe_env("daskrl.testing.environments.envs:take_turns")
    group = game_group("daskrl.testing.environments.envs:take_turns", layout, seed=0)
    player = RandomPlayer(group.envs[0], layout, seed=0)
    stats = game_stats(play_games(group, lambda game: ([player, player], None), 4), layout.agent_ids)
    assert stats["episodes"] == 4 and not stats["zero_sum"] and stats["seats"] == {}
    assert stats["agents"]["p0"]["return_mean"] > 100  # +100 at the end, 10 a move


# ---- daskrl enjoy on a trained experiment ----


@slow("trains race to ten briefly (trained), then enjoy in a process of its own")
def test_enjoy_against_a_random_opponent_prints_each_seats_wins_draws_and_losses(trained):
    done = subprocess.run([sys.executable, "-m", "daskrl", "enjoy", "--train-dir", str(trained["train_dir"]),
                           "--experiment", "race", "--opponent", "random", "--episodes", str(EPISODES)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": REPO})
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert re.search(r"return per agent: first -?[\d.]+ ± [\d.]+, second -?[\d.]+ ± [\d.]+", out), out
    seats = re.findall(r"policy 0 in seat (\w+): (\d+) games, (\d+) won, (\d+) drawn, (\d+) lost", out)
    assert [s[0] for s in seats] == ["first", "second"], out
    counts = [tuple(map(int, s[1:])) for s in seats]
    assert all(games == won + drawn + lost for games, won, drawn, lost in counts), out
    assert [games for games, *_ in counts] == [EPISODES // 2] * 2  # the seats alternate


@slow("trains race to ten briefly (trained)")
def test_enjoy_seats_agents_by_the_runs_mapping_and_a_snapshot_by_its_version(trained):
    from daskrl.evaluation import enjoy

    versions = trained["snapshot_versions"]
    assert len(versions) == 2 and all(v > 1 for v in versions), versions  # past versions, not the initial weights
    # self-play mapping: policy 0's seat alternates, the snapshots take turns in the other
    result = enjoy(str(trained["dir"]), episodes=4, seed=1)
    names = [f"snapshot of version {v}" for v in versions]
    assert [g.players for g in result["games"]] == [("policy 0", names[0]), (names[1], "policy 0"),
                                                    ("policy 0", names[0]), (names[1], "policy 0")]
    first, second = result["seats"]["first"], result["seats"]["second"]
    assert first["games"] == second["games"] == 4 and (first["won"], first["lost"]) == (second["lost"], second["won"])
    # a snapshot by its version, policy 0 in the seat asked for
    result = enjoy(str(trained["dir"]), episodes=3, opponent=f"snapshot:{versions[1]}", seat="second")
    assert {g.players for g in result["games"]} == {(names[1], "policy 0")}
    assert result["seats"]["second"]["games"] == 3 and result["seats"]["first"]["games"] == 0
    # the per-agent returns are the games' returns
    assert result["agents"]["first"]["return_mean"] == pytest.approx(np.mean([r[0] for r in result["returns"]]))


@slow("trains race to ten briefly (trained)")
def test_what_cannot_be_played_is_refused_in_one_line(trained, tmp_path, capsys):
    def refused(train_dir, experiment: str, *flags: str) -> str:
        code = main(["enjoy", "--train-dir", str(train_dir), "--experiment", experiment, "--episodes", "1", *flags])
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1, err
        return err

    versions = ", ".join(map(str, trained["snapshot_versions"]))
    assert f"holds the snapshots of versions {versions}" in refused(trained["train_dir"], "race", "--opponent",
                                                                     "snapshot:99999")
    assert "name one as random, policy:J" in refused(trained["train_dir"], "race", "--opponent", "best")
    assert "trained 1 policy (policy:0..policy:0)" in refused(trained["train_dir"], "race", "--opponent", "policy:3")
    assert "seats are first, second" in refused(trained["train_dir"], "race", "--opponent", "random", "--seat", "x")
    assert "give --opponent too" in refused(trained["train_dir"], "race", "--seat", "first")
    # only the options matter here: experiments of a three-agent and a single-agent env, before any training
    for name, env in (("three", "daskrl.testing.environments.envs:staggered"), ("single", "CartPole-v1")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(Config().replace(env=env, experiment=name).to_json())
    assert "has 3 agents: leave --opponent" in refused(tmp_path, "three", "--opponent", "random")
    assert "single-agent env: leave them out" in refused(tmp_path, "single", "--opponent", "random")


# ---- while training ----


@slow("trains race to ten briefly (trained)")
def test_evaluation_while_training_logs_each_agents_return(trained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    evals = [r for r in trained["rows"] if not math.isnan(r["eval_return_mean"])]
    assert evals, trained["rows"]
    for r in evals:  # zero-sum, one game each: the two seats' means cancel out
        assert r["eval_episodes"] == 10 and -1 <= r["eval_return/first"] <= 1
        assert r["eval_return/first"] + r["eval_return/second"] == pytest.approx(0.0)
        assert r["eval_return_mean"] == pytest.approx(0.0) and 5 <= 2 * r["eval_length_mean"] <= 10
    acc = EventAccumulator(str(trained["dir"] / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    logged = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in ("eval/return/first", "eval/return/second")}
    assert [step for step, _ in logged["eval/return/first"]] == [int(r["eval_env_steps"]) for r in evals]
    assert [v for _, v in logged["eval/return/second"]] == pytest.approx([r["eval_return/second"] for r in evals])


@slow("trains race to ten briefly (trained), then a video")
def test_videos_of_a_multi_agent_game_while_training_and_from_enjoy(trained, tmp_path):
    if not has_video():
        pytest.skip("imageio-ffmpeg is not installed (pip install 'daskrl[video]')")
    from daskrl.evaluation import enjoy

    videos = sorted((trained["dir"] / "videos").glob("video_*.mp4"))
    assert videos and all(5 <= frame_count(v) <= 10 for v in videos)  # one game: a frame per move
    out = tmp_path / "race.mp4"
    result = enjoy(str(trained["dir"]), episodes=2, opponent="random", video=str(out))
    assert result["video_frames"] == sum(g.length for g in result["games"]) == frame_count(out)


# ---- export and serving ----


def both_seats_observations(n: int, seed: int) -> np.ndarray:
    """``n`` observations of race to ten, from both seats, by random moves, games restarted as they end."""
    from daskrl.envs import make_env

    env, rng, seen = make_env(GAME, seed=seed), np.random.default_rng(seed), []
    env.reset(seed=seed)
    while len(seen) < n:
        agent = env.agent_selection
        seen.append(env.observe(agent))
        done = env.terminations[agent] or env.truncations[agent]
        env.step(None if done else int(rng.integers(2)))
        if not env.agents:
            env.reset()
    env.close()
    return np.asarray(seen, np.float32)


@pytest.mark.parametrize("fmt", ["pt2", "torchscript"])
def test_a_multi_agent_policy_exports_and_its_file_acts_as_the_model_on_each_agents_observations(trained, fmt):
    """A PettingZoo-shaped env's ``observation_space`` is a method of the agent: the file takes an agent's
    observation, and its description names the agents and the mapping that seats the policy."""
    import torch

    from daskrl import export
    from daskrl.evaluation import load_policy

    described = export(str(trained["dir"]), fmt, output=str(trained["dir"] / f"race.{fmt}"))
    assert described["agents"] == ["first", "second"] and described["policy_mapping"] == "auto"
    assert described["inputs"][0]["shape"] == ["batch", 11]
    obs = both_seats_observations(200, seed=5)
    module = torch.export.load(described["path"]).module() if fmt == "pt2" else torch.jit.load(described["path"])
    actions, values = (x.numpy() for x in module(torch.from_numpy(obs))[:2])
    _, model, _ = load_policy(str(trained["dir"]))
    want_actions, _, _ = model.act(obs, deterministic=True)
    np.testing.assert_array_equal(actions, want_actions)
    assert np.std(values) > 0, "values that ignore the observations"


def test_a_multi_agent_policy_is_served_one_agents_observation_at_a_time(trained):
    from daskrl import serve
    from daskrl.evaluation import load_policy

    obs = both_seats_observations(100, seed=6)
    with serve("race", train_dir=str(trained["train_dir"]), policy=0, deterministic=True) as server:
        served = server.act(obs)
        assert server.info()["observation"] == {"shape": [11], "dtype": "float32"}
    _, model, _ = load_policy(str(trained["dir"]))
    np.testing.assert_array_equal(served, model.act(obs, deterministic=True)[0])


TICTACTOE = "pettingzoo.classic.tictactoe.tictactoe:env"


@pytest.fixture(scope="module")
def two_policies(tmp_path_factory) -> Path:
    """PettingZoo's tic-tac-toe (Dict observations with an action mask) trained briefly with two policies of their
    own (the auto mapping seats them in turn)."""
    pytest.importorskip("pettingzoo", reason="the multiagent extra (pip install 'daskrl[multiagent]') is not installed")
    from daskrl import train

    tmp = tmp_path_factory.mktemp("two_policies")
    train(Config().replace(env=TICTACTOE, train_dir=str(tmp), experiment="ttt", dashboard_address="", num_policies=2,
                           num_workers=1, num_envs_per_worker=8, rollout=16, batch_size=128, train_for_env_steps=6_000,
                           train_for_seconds=120, report_interval=0.5))
    return tmp / "ttt"


def tictactoe_observations(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    """``n`` Dict observations of tic-tac-toe from both seats (the board and the legal moves), by random legal
    moves, games restarted as they end."""
    from daskrl.envs import make_env

    env, rng, seen = make_env(TICTACTOE, seed=seed), np.random.default_rng(seed), []
    env.reset(seed=seed)
    while len(seen) < n:
        obs, _, terminated, truncated, _ = env.last()
        if terminated or truncated:
            env.step(None)
        else:
            seen.append(obs)
            env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
        if not env.agents:
            env.reset()
    env.close()
    return seen


@slow("a 6,000-step two-policy tic-tac-toe run, two exports and two servers")
def test_each_policy_of_a_two_policy_game_exports_and_serves_as_enjoy_plays_it(two_policies):
    """One file and one server per policy (``--policy K``): each acts on either seat's observations as that policy's
    network does where ``daskrl enjoy`` seats it, and the two policies are not the same network."""
    import torch

    from daskrl import export, serve
    from daskrl.envs.layouts.dict_obs import pack_into
    from daskrl.evaluation import load_policy

    observations = tictactoe_observations(300, seed=7)
    chosen = []
    for policy in (0, 1):
        _, model, _ = load_policy(str(two_policies), policy=policy)
        packed = np.stack([pack_into(np.zeros(model.spaces.obs_shape, np.uint8), o, model.spaces.obs_keys)
                           for o in observations])
        want = model.act(packed, deterministic=True)[0]
        assert all(o["action_mask"][a] for o, a in zip(observations, want, strict=True))  # legal moves only
        described = export(str(two_policies), "pt2", policy=policy,
                           output=str(two_policies / f"policy_{policy}.pt2"))
        assert described["agents"] == ["player_1", "player_2"] and described["num_policies"] == 2
        module = torch.export.load(described["path"]).module()
        inputs = [i for i in described["inputs"] if i["name"] != "rnn_state"]  # one per key of the observation
        feeds = [torch.from_numpy(np.stack([np.asarray(o[i["name"]], dtype=i["dtype"]) for o in observations]))
                 for i in inputs]
        np.testing.assert_array_equal(module(*feeds)[0].numpy(), want)
        with serve("ttt", train_dir=str(two_policies.parent), policy=policy, deterministic=True) as server:
            np.testing.assert_array_equal(server.act(observations), want)
        chosen.append(want)
    assert not np.array_equal(*chosen), "both files and servers hold one network"


def test_a_server_follows_one_policy_of_a_live_multi_agent_run(session, tmp_path):
    """--follow on a multi-agent run: the server's network is the one the policy plays its agents with, and it
    takes the newer versions the run publishes."""
    import daskrl

    from ..helpers import run_config, wait_for

    config = run_config(tmp_path, "live_race", env=GAME, num_workers=1, num_envs_per_worker=8, rollout=16,
                        batch_size=128, self_play_snapshots=2, train_for_env_steps=0, train_for_seconds=60)
    run = daskrl.start(config, client=session.client)
    try:
        with daskrl.serve(client=session.client, follow="live_race", policy=0) as server:
            obs = both_seats_observations(8, seed=7)
            first = server.act(obs, return_version=True)[1]
            wait_for(lambda: server.act(obs, return_version=True)[1] > first, timeout=30, what="a newer version")
            assert server.info()["observation"] == {"shape": [11], "dtype": "float32"}
    finally:
        run.stop(timeout=60)
