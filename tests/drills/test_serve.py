"""daskrl serve: a trained policy answering observations over HTTP (the command as a user runs it) and through the
Dask client, concurrent requests sharing forward passes, a recurrent state per client, and a live run's newest
weights (--follow). The policies are real: tiny CartPole runs trained in this module."""

from __future__ import annotations

import http.client
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

import gymnasium as gym
import numpy as np
import psutil
import pytest

import daskrl
from daskrl.cli import main
from daskrl.errors import ClusterAccessError, ConfigError, RequestError
from daskrl.evaluation import load_policy
from daskrl.evaluation.loading import untrained_model
from daskrl.serving.policy import ServedPolicy
from daskrl.serving.service import PolicyService, ServiceThread

from ..helpers import SMALL_CARTPOLE, free_port, get_json, run_config, slow, wait_for

DASKRL = [sys.executable, "-m", "daskrl"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, session):
    """Two tiny CartPole runs on the module's cluster: a feed-forward policy and a GRU one (a few thousand steps:
    real checkpoints, not good policies)."""
    train_dir = tmp_path_factory.mktemp("serve")
    for name, rnn in (("ff", "none"), ("gru", "gru")):
        daskrl.train(run_config(train_dir, name, **SMALL_CARTPOLE, train_for_env_steps=3000, rnn=rnn),
                     client=session.client)
    return train_dir


def cartpole_observations(n: int, seed: int = 0) -> np.ndarray:
    """``n`` observations of real CartPole episodes (random actions)."""
    env, rng, out = gym.make("CartPole-v1"), np.random.default_rng(seed), []
    obs, _ = env.reset(seed=seed)
    while len(out) < n:
        out.append(obs)
        obs, _, terminated, truncated, _ = env.step(int(rng.integers(2)))
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    return np.asarray(out, np.float32)


def enjoy_actions(experiment_dir, observations: np.ndarray) -> np.ndarray:
    """What ``daskrl enjoy --deterministic`` takes on each observation: the loaded model, one observation a step."""
    _, model, _ = load_policy(str(experiment_dir))
    return np.array([model.act(o[None], deterministic=True)[0][0] for o in observations])


def post(conn: http.client.HTTPConnection, body: dict | bytes) -> tuple[int, dict]:
    conn.request("POST", "/act", body if isinstance(body, bytes) else json.dumps(body),
                 {"Content-Type": "application/json"})
    reply = conn.getresponse()
    return reply.status, json.loads(reply.read())


def connection(url: str) -> http.client.HTTPConnection:
    parsed = urlparse(url)
    return http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)


@slow("starts `daskrl serve` as a process (torch's import), then 1,000 requests over HTTP")
def test_http_answers_1000_observations_from_8_clients_as_enjoy_would(trained):
    port = free_port()
    proc = subprocess.Popen(DASKRL + ["serve", "--experiment", "ff", "--train-dir", str(trained), "--port", str(port),
                                      "--deterministic", "--max-wait-ms", "5"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        started = proc.stdout.readline()
        assert f"at http://127.0.0.1:{port}: POST /act" in started, started + proc.stdout.read()[-2000:]
        url = f"http://127.0.0.1:{port}"
        observations = cartpole_observations(1000)

        def client(part: np.ndarray) -> list[int]:  # one observation a request, as an agent stepping one env
            conn = connection(url)
            answers = [post(conn, {"observations": o.tolist(), "client_id": f"c{id(part)}"}) for o in part]
            conn.close()
            assert all(status == 200 and len(a["actions"]) == 1 for status, a in answers), answers[:3]
            return [a["actions"][0] for _, a in answers]

        with ThreadPoolExecutor(8) as pool:
            served = np.concatenate(list(pool.map(client, np.array_split(observations, 8))))
        assert np.array_equal(served, enjoy_actions(trained / "ff", observations))
        stats = get_json(url + "/stats")
        assert stats["requests"] == 1000 and stats["rows"] == 1000
        assert stats["shared_passes"] > 0 and stats["largest_pass_requests"] > 1, stats  # batching happened
        assert stats["forward_passes"] < 1000

        conn = connection(url)  # bad input: one readable line each, and the server goes on
        status, reply = post(conn, b"{not json")
        assert status == 400 and "the body is not JSON" in reply["error"]
        status, reply = post(conn, {"observations": [0.1, 0.2, 0.3]})
        assert status == 400 and reply["error"] == ("observations of shape [3]: this policy takes one observation "
                                                    "of shape [4] or a batch of shape ['n', 4] (float32)")
        status, reply = post(conn, {"observation": [0.0] * 4})
        assert status == 400 and "unknown field(s) 'observation'" in reply["error"]
        status, reply = post(conn, {"observations": observations[:3].tolist()})
        assert status == 200 and reply["actions"] == served[:3].tolist()
        info = get_json(url + "/")
        assert info["env"] == "CartPole-v1" and info["action"]["num_actions"] == 2
        assert info["observation"] == {"shape": [4], "dtype": "float32"} and info["policy_version"] > 0
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0 and "stopped after 1,001 requests" in out, out[-2000:]
    assert "Traceback" not in out


def self_signed_certificate(folder) -> tuple[str, str]:
    """A certificate for 127.0.0.1 and its key, made by openssl for this test (PEM files)."""
    cert, key = str(folder / "cert.pem"), str(folder / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def fuzz_requests(rng: np.random.Generator, n: int, token: str) -> list[tuple[str, str, str, bytes | None, dict]]:
    """``n`` requests no server should act on, as (kind, method, path, body, headers): bodies that are not JSON or
    nest too deep, observations of the wrong shape, type or size, NaN and infinity, numbers past a float, fields
    that do not exist or are of the wrong kind, bodies over the bounds, no token or the wrong one, and paths or
    methods that do not exist."""
    auth = {"Authorization": f"Bearer {token}"}
    good = [0.01, -0.02, 0.03, 0.04]

    def act(fields: dict) -> bytes:
        return json.dumps(fields).encode()

    def pick(options: list):
        return options[int(rng.integers(len(options)))]

    def one(kind: str) -> tuple[str, str, bytes | None, dict]:
        k = int(rng.integers(1, 5))
        if kind == "not JSON":
            return "POST", "/act", bytes(rng.integers(0, 256, int(rng.integers(1, 200)), dtype=np.uint8)), auth
        if kind == "cut short":
            return "POST", "/act", act({"observations": good})[:int(rng.integers(1, 30))], auth
        if kind == "not an object":
            return "POST", "/act", pick([b"[]", b'"observations"', b"3", b"null", b"true"]), auth
        if kind == "deep":
            depth = pick([1_000, 10_000, 200_000])
            return "POST", "/act", b'{"observations": ' + b"[" * depth + b"]" * depth + b"}", auth
        if kind == "shape":
            width = pick([0, 1, 2, 3, 5, 9])
            return "POST", "/act", act({"observations": rng.normal(size=(k, width)).tolist()}), auth
        if kind == "ragged":
            return "POST", "/act", act({"observations": [good, good[:3]]}), auth
        if kind == "not numbers":
            return "POST", "/act", act({"observations": [good[:2] + [pick(["x", None, [], {}])] + good[3:]]}), auth
        if kind == "non-finite":
            value = pick([b"NaN", b"Infinity", b"-Infinity", b"1e999"])
            return "POST", "/act", b'{"observations": [0.1, ' + value + b", 0.2, 0.3]}", auth
        if kind == "past a float":
            return "POST", "/act", b'{"observations": [1' + b"0" * 400 + b", 0, 0, 0]}", auth
        if kind == "fields":
            field = pick(["unknown", "client_id", "long client_id", "deterministic", "reset", "missing"])
            body = {"unknown": {"observations": good, "obs": good}, "client_id": {"observations": good, "client_id": 7},
                    "long client_id": {"observations": good, "client_id": "c" * 5000},
                    "deterministic": {"observations": good, "deterministic": "yes"},
                    "reset": {"observations": [good] * 2, "reset": [True]}, "missing": {"client_id": "a"}}[field]
            return "POST", "/act", act(body), auth
        if kind == "too many rows":
            return "POST", "/act", act({"observations": [good] * int(rng.integers(65, 400))}), auth
        if kind == "too many bytes":
            return "POST", "/act", act({"observations": rng.normal(size=(2_000, 4)).tolist()}), auth
        if kind == "no token":
            return "POST", "/act", act({"observations": good}), pick([{}, {"Authorization": "Bearer nope"},
                                                                          {"Authorization": f"Basic {token}"}])
        if kind == "no such path":
            return pick(["GET", "POST"]), pick(["/nope", "/act/2", "/admin"]), None, auth
        assert kind == "no such method"
        return pick(["GET", "PUT", "DELETE"]), "/act", None, auth

    kinds = ["not JSON", "cut short", "not an object", "deep", "shape", "ragged", "not numbers", "non-finite",
             "past a float", "fields", "too many rows", "too many bytes", "no token", "no such path", "no such method"]
    return [(kind, *one(kind)) for kind in (kinds[i % len(kinds)] for i in rng.permutation(n))]


def https_ask(port: int, cafile: str, method: str, path: str, body: bytes | None, headers: dict) -> tuple[int, dict]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=30,
                                       context=ssl.create_default_context(cafile=cafile))
    try:
        conn.request(method, path, body, {"Content-Type": "application/json", **headers})
        reply = conn.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        conn.close()


@slow("`daskrl serve` over HTTPS with a token, 1,000 bad requests and 100 good ones between them")
def test_a_server_facing_a_network_answers_every_bad_request_with_a_4xx_and_goes_on_serving(trained, tmp_path):
    cert, key = self_signed_certificate(tmp_path)
    token = "fuzz-0123456789abcdef"
    (tmp_path / "token").write_text(token + "\n")
    port = free_port()
    proc = subprocess.Popen(DASKRL + ["serve", "--experiment", "ff", "--train-dir", str(trained), "--port", str(port),
                                      "--deterministic", "--max-batch-rows", "64", "--max-body-mb", "0.05",
                                      "--token-file", str(tmp_path / "token"), "--tls-cert", cert, "--tls-key", key],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        started = proc.stdout.readline()
        assert f"at https://127.0.0.1:{port}: POST /act" in started, started + proc.stdout.read()[-2000:]
        plain = connection(f"http://127.0.0.1:{port}")
        with pytest.raises((http.client.HTTPException, ConnectionError)):  # plain HTTP to the HTTPS port
            plain.request("GET", "/health")
            plain.getresponse()
        plain.close()
        auth = {"Authorization": f"Bearer {token}"}
        observations = cartpole_observations(100, seed=7)
        server = psutil.Process(proc.pid)
        answers, rss = [], []
        for i, (kind, method, path, body, headers) in enumerate(fuzz_requests(np.random.default_rng(0), 1000, token)):
            status, reply = https_ask(port, cert, method, path, body, headers)
            assert 400 <= status < 500 and isinstance(reply.get("error"), str) and reply["error"], (kind, status, reply)
            if i % 10 == 9:  # the server keeps answering good requests between the bad ones
                status, reply = https_ask(port, cert, "POST", "/act",
                                          json.dumps({"observations": observations[i // 10].tolist()}).encode(), auth)
                assert status == 200, reply
                answers.append(reply["actions"][0])
            if i in (199, 999):
                rss.append(server.memory_info().rss)
        assert np.array_equal(answers, enjoy_actions(trained / "ff", observations))
        growth_mb = (rss[1] - rss[0]) / 2**20
        print(f"server RSS after 200 bad requests {rss[0] / 2**20:.1f} MB, after 1,000 {rss[1] / 2**20:.1f} MB")
        assert growth_mb < 8, f"the server's memory grew {growth_mb:.1f} MB over 800 bad requests"
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0 and "Traceback" not in out, out[-3000:]


@slow("a policy server on a worker, 1,000 actor calls")
def test_the_dask_client_path_answers_the_same_actions(trained, session):
    observations = cartpole_observations(1000)
    with daskrl.serve("ff", session.client, train_dir=str(trained), port=0, deterministic=True) as server:
        assert server.url is not None and get_json(server.url + "/health")["status"] == "ok"

        def client(part: np.ndarray) -> list[int]:
            return [int(server.act(o)) for o in part]

        with ThreadPoolExecutor(4) as pool:
            served = np.concatenate(list(pool.map(client, np.array_split(observations, 4))))
        expected = enjoy_actions(trained / "ff", observations)
        assert np.array_equal(served, expected)
        actions, version = server.act(observations[:10], return_version=True)  # a batch: an action per row
        assert np.array_equal(actions, expected[:10]) and version == server.info()["policy_version"] > 0
        with pytest.raises(RequestError, match=r"observations of shape \[10, 3\]: this policy takes"):
            server.act(observations[:10, :3])
        assert int(server.act(observations[0])) == expected[0]  # still serving
        assert server.stats()["requests"] == 1002


def play(server_url: str, client_id: str, seeds: list[int], steps: int, barrier: threading.Barrier) -> list[tuple]:
    """Step ``len(seeds)`` CartPole envs (one request a step, a row each) with the served policy's actions, resetting
    rows whose episode begins (and every env half-way: a client starting again); returns (observations, resets,
    actions) per step."""
    envs = [gym.make("CartPole-v1") for _ in seeds]
    obs = np.array([env.reset(seed=s)[0] for env, s in zip(envs, seeds, strict=True)])
    starts = np.ones(len(envs), bool)
    conn, history = connection(server_url), []
    for step in range(steps):
        if step == steps // 2:
            obs, starts = np.array([env.reset()[0] for env in envs]), np.ones(len(envs), bool)
        barrier.wait(timeout=30)  # the other client asks at the same moment: their requests share passes
        status, reply = post(conn, {"observations": obs.tolist(), "client_id": client_id, "reset": starts.tolist(),
                                    "deterministic": True})
        assert status == 200, reply
        history.append((obs.copy(), starts.copy(), np.array(reply["actions"])))
        for i, (env, action) in enumerate(zip(envs, reply["actions"], strict=True)):
            obs[i], _, terminated, truncated, _ = env.step(action)
            starts[i] = terminated or truncated
            if starts[i]:
                obs[i] = env.reset()[0]
    conn.close()
    return history


def sequential_play(model, history: list[tuple], row: int) -> np.ndarray:
    """One env's steps replayed alone through the model, its state carried from step to step as enjoy does."""
    state, actions = np.zeros((1, model.state_size), np.float32), []
    for obs, starts, _ in history:
        if starts[row]:
            state[:] = 0.0
        actions.append(model.act(obs[row][None], deterministic=True, state=state)[0][0])
    return np.array(actions)


@slow("two HTTP clients of a GRU policy playing 40 steps in step, then the same plays replayed alone")
def test_a_recurrent_policy_keeps_a_state_per_client(trained):
    with daskrl.serve("gru", train_dir=str(trained), port=0, max_wait_ms=20) as server:
        barrier = threading.Barrier(2)
        with ThreadPoolExecutor(2) as pool:  # one client plays one env, the other two (a row each), interleaved
            solo = pool.submit(play, server.url, "solo", [1], 40, barrier)
            pair = pool.submit(play, server.url, "pair", [2, 3], 40, barrier)
            solo, pair = solo.result(), pair.result()
        stats = server.stats()
        assert stats["shared_passes"] > 0 and stats["clients_with_state"] == 2, stats
        status, reply = post(connection(server.url), {"observations": [[0.0] * 4] * 3, "client_id": "pair"})
        assert status == 400 and "sent 2 observation(s) per request before and 3 now" in reply["error"]
        taken = urlparse(server.url).port
        with pytest.raises(ConfigError, match=f"cannot serve HTTP on 127.0.0.1:{taken}"):
            daskrl.serve("gru", train_dir=str(trained), port=taken)
    _, model, _ = load_policy(str(trained / "gru"))
    for history, row in ((solo, 0), (pair, 0), (pair, 1)):
        served = np.array([actions[row] for _, _, actions in history])
        assert np.array_equal(served, sequential_play(model, history, row))


def test_a_new_version_is_taken_between_passes_never_within_one(trained):
    """Weights swapped before every pass (as a followed run's are): each answer is exactly what the version it names
    computes, however the concurrent requests were batched."""
    config, model, _ = load_policy(str(trained / "ff"))
    weights = [untrained_model(config).state_dict_numpy(), model.state_dict_numpy()]  # odd versions: trained
    policy = ServedPolicy(model, 1, "CartPole-v1", deterministic=True)
    service = PolicyService(policy, max_batch=64, max_wait_ms=2, max_clients=10, about={},
                            refresh=lambda: policy.load(policy.version + 1, weights[(policy.version + 1) % 2]))
    observations = cartpole_observations(8 * 40).reshape(40, 8, 4)
    expected = []
    for w in weights:
        model.load_state_dict_numpy(w)
        expected.append(np.array([model.act(o, deterministic=True)[0] for o in observations]))
    assert not np.array_equal(expected[0], expected[1]), "the two versions act alike: the test would prove nothing"
    thread = ServiceThread(service)
    thread.start()
    try:
        with ThreadPoolExecutor(4) as pool:
            replies = list(pool.map(lambda o: service.request(o).result(timeout=30), observations))
    finally:
        thread.stop()
    for i, reply in enumerate(replies):
        assert np.array_equal(reply["actions"], expected[reply["policy_version"] % 2][i]), reply
    assert service.stats()["shared_passes"] > 0 and len({r["policy_version"] for r in replies}) > 1


@slow("a live run on the module's cluster, followed until it publishes a newer version")
def test_follow_serves_the_newest_version_a_live_run_publishes(trained, session):
    config = run_config(trained, "live", **SMALL_CARTPOLE, train_for_env_steps=0, train_for_seconds=60)
    run = daskrl.start(config, client=session.client)
    try:
        with daskrl.serve(client=session.client, follow="live", port=0) as server:
            obs = cartpole_observations(8)
            first = server.act(obs, return_version=True)[1]
            assert first > 0 and server.info()["follow"] == "live"
            newer = wait_for(lambda: (v := server.act(obs, return_version=True)[1]) > first and v, timeout=30,
                             what="a newer version served")
            assert get_json(server.url + "/health")["policy_version"] >= newer
            assert server.stats()["follow"] == {"run": "live", "state": "live", "parameter_blocks": 1}
    finally:
        run.stop(timeout=60)
    with pytest.raises(ClusterAccessError, match="no run named 'live' is training on this cluster"):
        daskrl.serve(client=session.client, follow="live")


def test_bad_options_are_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match="--experiment is missing"):
        daskrl.serve()
    with pytest.raises(ConfigError, match="--follow live: following a live run needs its cluster"):
        daskrl.serve("ff", follow="live")
    with pytest.raises(ConfigError, match="--max-batch 0: a forward pass takes at least 1 observation"):
        daskrl.serve("ff", train_dir=str(tmp_path), max_batch=0)
    with pytest.raises(ConfigError, match="is not a daskrl experiment directory"):
        daskrl.serve("nope", train_dir=str(tmp_path))


def test_the_command_refuses_a_missing_experiment_with_exit_2(tmp_path, capsys):
    assert main(["serve", "--experiment", "nope", "--train-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "daskrl: error: invalid configuration:" in err and "is not a daskrl experiment directory" in err
    assert main(["serve", "--follow", "live"]) == 2
    assert "following a live run needs its cluster: --scheduler ADDRESS" in capsys.readouterr().err
