"""A policy server facing a network (daskrl/serving/http_guard.py, request.py, policy.py): the checks a request meets
before it reaches a batch that other clients share (non-finite numbers, too many rows, nesting past what a reader
takes, numbers past a float), the token and the body bound of the HTTP face, and the options that set them. The
server here is the real HTTP face on a thread of this process, in front of an untrained CartPole policy."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator

import gymnasium as gym
import numpy as np
import pytest

from daskrl.config import ModelConfig
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.errors import ConfigError, RequestError
from daskrl.models.actor_critic import build_model
from daskrl.serving.http_app import HttpFrontend, parse_body
from daskrl.serving.http_guard import TOKEN_VARIABLE, HttpGuard, guard_from_options
from daskrl.serving.policy import ServedPolicy
from daskrl.serving.service import PolicyService, ServiceThread

BOX4 = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)


def cartpole_service(max_batch_rows: int = 64, obs_space: gym.Space = BOX4) -> PolicyService:
    spaces = EnvSpaces.from_spaces(obs_space, gym.spaces.Discrete(2))
    policy = ServedPolicy(build_model(spaces, ModelConfig(), seed=0), 0, "CartPole-v1", deterministic=True)
    return PolicyService(policy, 256, 1.0, 10, {}, max_batch_rows=max_batch_rows)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_observations_are_refused_with_their_rows(bad):
    service = cartpole_service()
    with pytest.raises(RequestError, match=r"NaN or infinity \(rows 1, 3\): a policy acts on finite numbers only"):
        service.request([[0.0] * 4, [0.0, bad, 0.0, 0.0], [0.0] * 4, [bad] * 4])
    with pytest.raises(RequestError, match=r"\(row 0\)"):
        service.request([0.1, 0.2, bad, 0.4])
    assert not service.request([[0.0] * 4] * 2).done()  # finite rows are queued for a pass (no thread serves here)


def test_a_dict_observation_with_a_nan_is_refused_by_key():
    service = cartpole_service(obs_space=gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,), np.float32),
                                                          "cue": gym.spaces.Discrete(3)}))
    with pytest.raises(RequestError, match=r"NaN or infinity \(row 0, key 'pos'\)"):
        service.request({"pos": [float("nan"), 0.0], "cue": 1})
    service.request({"pos": [0.5, 0.0], "cue": 1})


def test_a_request_over_the_row_bound_is_refused_and_one_at_it_is_taken():
    service = cartpole_service(max_batch_rows=8)
    with pytest.raises(RequestError, match=r"9 observations in one request: this server takes at most 8 "
                                           r"\(--max-batch-rows\); send them in several requests"):
        service.request(np.zeros((9, 4)).tolist())
    service.request(np.zeros((8, 4)).tolist())


@pytest.mark.parametrize("body, says", [
    (b"[" * 100_000 + b"]" * 100_000, "nests arrays or objects too deeply"),
    (b'{"observations": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nests arrays or objects too deeply"),
    (b"\xff\xfe", "the body is not JSON"),
])
def test_bodies_no_reader_takes_are_request_errors(body, says):
    with pytest.raises(RequestError, match=says):
        parse_body(body)


@pytest.mark.parametrize("observations", [
    [[[[0.0] * 4]]] * 2,  # deeper than the shape
    [10 ** 400, 0, 0, 0],  # past any float
    [0.0, "x", 0.0, 0.0],
    [[0.0] * 4, [0.0] * 3],  # ragged
    [],
])
def test_observations_no_policy_takes_are_request_errors(observations):
    with pytest.raises(RequestError, match="this policy takes one observation of shape"):
        cartpole_service().request(observations)


def test_a_client_id_is_a_key_not_a_payload():
    with pytest.raises(RequestError, match="a client_id of 257 characters: at most 256"):
        cartpole_service().request([0.0] * 4, client_id="x" * 257)


def test_the_token_is_compared_whole_and_any_header_passes_without_one():
    guard = HttpGuard(token="s3cret")
    assert guard.allows("Bearer s3cret") and guard.allows("bearer s3cret ")
    for header in (None, "", "Bearer", "Bearer s3cre", "Bearer s3cret2", "Basic s3cret", "s3cret"):
        assert not guard.allows(header), header
    assert HttpGuard().allows(None)


def test_guard_options_are_refused_in_one_line_each(tmp_path, monkeypatch):
    monkeypatch.delenv(TOKEN_VARIABLE, raising=False)
    (tmp_path / "token").write_text("  \n")
    (tmp_path / "cert.pem").write_text("not a certificate")
    with pytest.raises(ConfigError) as caught:
        guard_from_options(0, "a", str(tmp_path / "token"), str(tmp_path / "cert.pem"))
    assert caught.value.problems == [
        "--max-body-mb 0: a request body of at least a few bytes must fit",
        "--token and --token-file: give one of them",
        f"the token is empty: give a secret of some length (--token-file, or ${TOKEN_VARIABLE})",
        "--tls-cert and --tls-key go together: the certificate and its private key (PEM files)"]
    with pytest.raises(ConfigError, match="--tls-cert/--tls-key: not a certificate and its private key in PEM"):
        guard_from_options(tls_cert=str(tmp_path / "cert.pem"), tls_key=str(tmp_path / "cert.pem"))
    with pytest.raises(ConfigError, match=r"--token-file .*nope: cannot read it \(No such file or directory\)"):
        guard_from_options(token_file=str(tmp_path / "nope"))
    monkeypatch.setenv(TOKEN_VARIABLE, "from-env")
    assert guard_from_options().token == "from-env"
    assert guard_from_options(token_file=str(tmp_path / "cert.pem")).token == "not a certificate"


@pytest.fixture
def guarded() -> Iterator[HttpFrontend]:
    """The HTTP face with a token and a 1 KB body bound, on a free port of this machine."""
    service = cartpole_service()
    thread = ServiceThread(service)
    thread.start()
    http = HttpFrontend(service, "127.0.0.1", 0, HttpGuard(max_body_bytes=1024, token="s3cret"))
    http.start()
    try:
        yield http
    finally:
        http.stop()
        thread.stop()


def ask(port: int, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
        chunked: bool = False) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        if chunked:
            conn.putrequest(method, path)
            for name, value in {**(headers or {}), "Transfer-Encoding": "chunked"}.items():
                conn.putheader(name, value)
            conn.endheaders()
            for start in range(0, len(body or b""), 256):
                part = body[start:start + 256]
                conn.send(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            conn.send(b"0\r\n\r\n")
        else:
            conn.request(method, path, body, headers or {})
        reply = conn.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        conn.close()


def test_the_http_face_wants_its_token_and_bounds_a_body_before_reading_it(guarded):
    port, token = guarded.port, {"Authorization": "Bearer s3cret"}
    one = json.dumps({"observations": [0.0] * 4}).encode()
    status, reply = ask(port, "POST", "/act", one)
    assert status == 401 and "wants its token: send the header 'Authorization: Bearer <token>'" in reply["error"]
    assert ask(port, "GET", "/stats")[0] == 401 and ask(port, "GET", "/")[0] == 401
    assert ask(port, "GET", "/health") == (200, {"status": "ok", "policy_version": 0})  # a probe needs no secret
    status, reply = ask(port, "POST", "/act", one, token)
    assert status == 200 and len(reply["actions"]) == 1
    big = json.dumps({"observations": np.zeros((100, 4)).tolist()}).encode()
    assert len(big) > 1024
    for chunked in (False, True):  # the bound, whether the body says its length or streams in chunks
        status, reply = ask(port, "POST", "/act", big, token, chunked=chunked)
        assert status == 413 and "this server reads at most 1,024 (--max-body-mb)" in reply["error"], (chunked, reply)
    status, reply = ask(port, "POST", "/act", one, token, chunked=True)
    assert status == 200, reply  # a chunked body under the bound is read as any other
    status, reply = ask(port, "POST", "/act", b'{"observations": [NaN, 0, 0, 0]}', token)
    assert status == 400 and "NaN or infinity" in reply["error"]
    assert ask(port, "GET", "/act", None, token)[0] == 405
    assert ask(port, "GET", "/stats", None, token)[1]["requests"] == 2
