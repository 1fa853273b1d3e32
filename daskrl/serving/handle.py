"""``daskrl.serve(experiment, client)``: a trained policy answering observations, and the handle that asks it.

Without a client the server runs in this process (a thread batches the requests; with ``port``, HTTP too): what
``daskrl serve`` does on a laptop. With a client (or a scheduler address) it is a :class:`PolicyServer` component
on a worker of that cluster, asked through the Dask client (and over HTTP from the worker's host with ``port``);
``follow`` serves a live run's newest weights instead of a checkpoint, and needs the run's cluster.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from daskrl.errors import ClusterAccessError, ComponentError, ConfigError, RequestError
from daskrl.evaluation.episodes import load_policy
from daskrl.evaluation.loading import experiment_config, untrained_model
from daskrl.models.registry import pack_components
from daskrl.runtime.access.cluster import ClusterSession, connect_cluster
from daskrl.runtime.access.runs import list_runs, run_params
from daskrl.runtime.actors.handles import ComponentHandle, spawn
from daskrl.runtime.memory.shm import host_of
from daskrl.serving.component import PolicyServer, ServeSetup
from daskrl.serving.http_app import HttpFrontend
from daskrl.serving.http_guard import DEFAULT_MAX_BODY_MB, guard_from_options
from daskrl.serving.policy import ServedPolicy
from daskrl.serving.service import PolicyService, ServiceThread

#: seconds an act() call may take before it is reported as unanswered
ACT_TIMEOUT_S = 60.0


class ServeHandle:
    """A served policy: ``act`` from any thread, ``info``, ``stats``, ``url`` (None without HTTP) and ``close``."""

    def __init__(self, backend: _Local | _OnCluster) -> None:
        self._backend = backend

    @property
    def url(self) -> str | None:
        return self._backend.url

    def act(self, observations: Any, client_id: str | None = None, deterministic: bool | None = None,
            reset: Any = False, return_version: bool = False) -> Any:
        """The actions for one observation (one action back) or a batch (an array, a row each). ``client_id``: a
        recurrent policy keeps a state per client and row (``reset``: start again, for all rows or some);
        ``deterministic``: the most likely action (None: the server's default). With ``return_version``,
        ``(actions, policy_version)``. A bad observation raises :class:`~daskrl.errors.RequestError`."""
        reply = self._backend.act(observations=observations, client_id=client_id, deterministic=deterministic,
                                  reset=reset)
        actions = np.asarray(reply["actions"])
        if reply["single"]:
            actions = actions[0]
        return (actions, reply["policy_version"]) if return_version else actions

    def info(self) -> dict[str, Any]:
        """The env, the spaces, the version served, the batching settings and the HTTP address."""
        return self._backend.info()

    def stats(self) -> dict[str, Any]:
        """The batching counters (``shared_passes``: forward passes that served more than one request)."""
        return self._backend.stats()

    def close(self) -> None:
        self._backend.close()

    def __enter__(self) -> ServeHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<ServeHandle {self._backend.where}{f' at {self.url}' if self.url else ''}>"


class _Local:
    """The server in this process."""

    where = "in this process"

    def __init__(self, service: PolicyService, http: HttpFrontend | None) -> None:
        self.service, self.http = service, http
        self.thread = ServiceThread(service)
        self.thread.start()
        self.url = http.start() if http is not None else None

    def act(self, **request: Any) -> dict[str, Any]:
        return self.service.request(**request).result(timeout=ACT_TIMEOUT_S)

    def info(self) -> dict[str, Any]:
        return {**self.service.info(), "url": self.url}

    def stats(self) -> dict[str, Any]:
        return self.service.stats()

    def close(self) -> None:
        if self.http is not None:
            self.http.stop()
        self.thread.stop()


class _OnCluster:
    """The server as a component on a worker, asked through the Dask client."""

    def __init__(self, session: ClusterSession, component: ComponentHandle) -> None:
        self.session, self.component = session, component
        self.where = f"on {component.address}"
        self.url = component.call("info")["url"]

    def act(self, **request: Any) -> dict[str, Any]:
        future = self.component.send("act", **request)
        try:
            return self.component.wait("act", future, ACT_TIMEOUT_S)
        except ComponentError as exc:  # a bad request is the caller's to fix: its own error, not the component's
            if isinstance(exc.__cause__, RequestError):
                raise exc.__cause__ from None
            raise

    def info(self) -> dict[str, Any]:
        return self.component.call("info")

    def stats(self) -> dict[str, Any]:
        stats = self.component.call("stats")
        return {**stats["serving"], **({"follow": stats["follow"]} if "follow" in stats else {})}

    def close(self) -> None:
        try:
            self.component.call("stop", timeout=30)
        finally:
            self.session.close()


def serve(experiment: str | None = None, client: Any = None, *, train_dir: str = "train_dir", which: str = "latest",
          policy: int = 0, follow: str | None = None, port: int | None = None, host: str | None = None,
          deterministic: bool = False, max_batch: int = 256, max_wait_ms: float = 2.0, max_clients: int = 10_000,
          max_batch_rows: int = 4096, max_body_mb: float = DEFAULT_MAX_BODY_MB, token: str | None = None,
          token_file: str | None = None, tls_cert: str | None = None, tls_key: str | None = None,
          worker: str | None = None, follow_timeout: float = 30.0) -> ServeHandle:
    """Serve ``policy`` of experiment ``experiment`` (under ``train_dir``): its ``which`` checkpoint ('latest',
    'best' or a file), or with ``follow`` the newest weights run ``follow`` publishes on ``client``'s cluster (the
    experiment defaults to the run's). ``client``: a Dask client or scheduler address (None: this process);
    ``port``: also serve HTTP there (0: a free port) on ``host`` (default 127.0.0.1 here, the worker's host on a
    cluster); ``worker``: the worker to serve from. Requests arriving within ``max_wait_ms`` of each other share
    one forward pass of at most ``max_batch`` rows; a recurrent policy keeps the states of ``max_clients`` clients.
    A request carries at most ``max_batch_rows`` observations; over HTTP its body at most ``max_body_mb``, and with
    ``token`` (or ``token_file``, or ``$DASKRL_SERVE_TOKEN``) it must say ``Authorization: Bearer <token>``;
    ``tls_cert`` and ``tls_key`` (PEM files) serve HTTPS (daskrl/serving/http_guard.py).
    """
    problems = _option_problems(experiment, client, follow, port, max_batch, max_wait_ms, max_clients, max_batch_rows)
    try:
        guard = guard_from_options(max_body_mb, token, token_file, tls_cert, tls_key)
    except ConfigError as exc:
        problems += exc.problems
    if problems:
        raise ConfigError(problems)
    session = connect_cluster(client) if client is not None else None
    try:
        desc, experiment_dir = None, os.path.join(train_dir, experiment or "")
        if follow:
            desc, run_dir = _followed_block(session.client, follow, policy, follow_timeout)
            experiment_dir = experiment_dir if experiment else run_dir
            config = experiment_config(experiment_dir, policy)
            model, version, about = untrained_model(config, policy), 0, {"experiment": experiment_dir, "follow": follow}
        else:
            config, model, state = load_policy(experiment_dir, which, policy)
            version = int(state.get("policy_version", 0))
            about = {"experiment": experiment_dir, "checkpoint": which, "env_steps_trained": int(state.get("env_steps", 0))}
        if session is None:
            service = PolicyService(ServedPolicy(model, version, config.env.env, deterministic), max_batch, max_wait_ms,
                                    max_clients, about, max_batch_rows=max_batch_rows)
            http = HttpFrontend(service, host or "127.0.0.1", port, guard) if port is not None else None
            return ServeHandle(_Local(service, http))
        setup = ServeSetup(
            spaces=model.spaces, model=config.model, seed=config.run.seed, components=pack_components(),
            env=config.env.env, weights=None if follow else model.state_dict_numpy(), version=version,
            follow=follow or "", params=desc, policy_index=policy, about=about, deterministic=deterministic,
            max_batch=max_batch, max_wait_ms=max_wait_ms, max_clients=max_clients, max_batch_rows=max_batch_rows,
            http_host=None if port is None else (host or ""), http_port=port or 0, http_guard=guard, torch_threads=1)
        return ServeHandle(_OnCluster(session, _start_server(session, setup, worker or _serving_worker(session, desc))))
    except BaseException:
        if session is not None:
            session.close()
        raise


def _option_problems(experiment: str | None, client: Any, follow: str | None, port: int | None, max_batch: int,
                     max_wait_ms: float, max_clients: int, max_batch_rows: int) -> list[str]:
    problems = []
    if not experiment and not follow:
        problems.append("--experiment is missing: the experiment whose policy to serve (or --follow a live run)")
    if follow and client is None:
        problems.append(f"--follow {follow}: following a live run needs its cluster: --scheduler ADDRESS (client= "
                        "from Python)")
    if port is not None and not 0 <= port <= 65535:
        problems.append(f"--port {port}: a TCP port is 0..65535 (0 picks a free one)")
    if max_batch < 1:
        problems.append(f"--max-batch {max_batch}: a forward pass takes at least 1 observation")
    if max_wait_ms < 0:
        problems.append(f"--max-wait-ms {max_wait_ms}: a wait is 0 ms or more")
    if max_clients < 1:
        problems.append(f"--max-clients {max_clients}: at least 1 client's recurrent states must be kept")
    if max_batch_rows < 1:
        problems.append(f"--max-batch-rows {max_batch_rows}: a request carries at least 1 observation")
    return problems


def _followed_block(client: Any, run: str, policy: int, timeout: float) -> tuple[dict, str]:
    """(the parameter block of ``policy``, the experiment directory) of live run ``run``, once its driver has told
    the registry (its first beat)."""
    deadline = time.monotonic() + timeout
    while True:
        found = run_params(client, run)  # no such live run: refused in one line
        params = found["params"]
        if params and not 0 <= policy < len(params):
            raise ConfigError([f"--policy {policy}: run {run!r} trains {len(params)} policies (0..{len(params) - 1})"])
        if params and params[policy] is not None:
            return params[policy], found["experiment"]
        if time.monotonic() > deadline:
            raise ClusterAccessError(f"run {run!r} told the cluster of no parameters within {timeout:.0f} s (a "
                                     "sampling-only run has none to serve)")
        time.sleep(0.2)


def _serving_worker(session: ClusterSession, desc: dict | None) -> str:
    """A worker to serve from: on the learner's host when its parameters are in shared memory only, preferring one
    that no run holds."""
    table = list_runs(session.client)
    workers = table["workers"]
    if desc is not None and not desc.get("variable"):
        workers = [w for w in workers if host_of(w) == desc["data"]["host"]]
    if not workers:
        raise ClusterAccessError("no worker to serve from: the cluster has none"
                                 + (" on the learner's host" if desc is not None else ""))
    held = {w for run in table["runs"] for w in run["workers"]}
    return next((w for w in workers if w not in held), workers[0])


def _start_server(session: ClusterSession, setup: ServeSetup, worker: str) -> ComponentHandle:
    component = spawn(session.client, PolicyServer, "serve", run_id=session.run_id, worker=worker, setup=setup)
    component.call("start")
    return component
