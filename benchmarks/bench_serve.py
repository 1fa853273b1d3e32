"""Policy serving: actions/s and p50/p99 latency of a CartPole policy, over HTTP with N concurrent clients and through
the Dask client.

Run:  python benchmarks/bench_serve.py [--json] [--clients 1,8,32] [--requests 4000] [--dask-clients 1,8]
      python benchmarks/bench_serve.py --experiment cartpole --train-dir train_dir   (serve an existing experiment)

A small CartPole policy is trained first on an embedded cluster (``--train-steps`` env steps; the policy's quality
does not change what a forward pass costs), unless ``--experiment`` names one. Then:

- ``http``: ``daskrl serve`` runs as its own process (as a user starts it) and N client threads of this process each
  send one observation per POST /act over a kept-alive connection, as agents stepping one env each;
- ``dask``: a policy server on a worker of the embedded cluster (``daskrl.serve(experiment, client)``) and N client
  threads each calling ``act(obs)``, one observation a call (an actor call each);
- ``policy alone``: the same network's forward pass in this process at batch 1 and at ``--max-batch``, without a
  server: the ceiling a server's batching works towards on this machine.

actions/s = requests answered / seconds of the whole burst; latency is each request's round trip as its client saw
it; rows/pass is how many observations one forward pass served on average (batching at work). Clients, server and
cluster share this machine's cores, so on a small machine the clients' own cost is part of what is measured.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

import numpy as np

import daskrl
from daskrl.config import Config
from daskrl.runtime import connect_cluster


def burst(clients: int, requests: int, make_client: Callable[[], Callable[[np.ndarray], None]]) -> dict:
    """``requests`` observations split over ``clients`` threads, each asking one at a time; the rate and the round
    trips."""
    obs = np.random.default_rng(0).normal(0, 0.1, (requests, 4)).astype(np.float32)

    def run(part: np.ndarray) -> list[float]:
        ask, times = make_client(), []
        for o in part:
            t0 = time.perf_counter()
            ask(o)
            times.append(time.perf_counter() - t0)
        return times

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        times = np.concatenate([np.asarray(t) for t in pool.map(run, np.array_split(obs, clients))])
    elapsed = time.perf_counter() - t0
    return {"clients": clients, "requests": requests, "actions_per_s": round(requests / elapsed, 1),
            "p50_ms": round(float(np.percentile(times, 50)) * 1e3, 3),
            "p99_ms": round(float(np.percentile(times, 99)) * 1e3, 3)}


def http_client(url: str) -> Callable[[], Callable[[np.ndarray], None]]:
    parsed = urlparse(url)

    def make() -> Callable[[np.ndarray], None]:
        conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)

        def ask(o: np.ndarray) -> None:
            conn.request("POST", "/act", json.dumps({"observations": o.tolist()}), {"Content-Type": "application/json"})
            reply = conn.getresponse()
            body = reply.read()
            if reply.status != 200:
                raise RuntimeError(f"HTTP {reply.status}: {body[:200]!r}")

        return ask

    return make


def get_stats(url: str) -> dict:
    parsed = urlparse(url)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
    conn.request("GET", "/stats")
    return json.loads(conn.getresponse().read())


def rows_per_pass(before: dict, after: dict) -> float:
    passes = after["forward_passes"] - before["forward_passes"]
    return round((after["rows"] - before["rows"]) / passes, 2) if passes else 0.0


def bench_http(args: argparse.Namespace, train_dir: str, experiment: str) -> list[dict]:
    proc = subprocess.Popen([sys.executable, "-m", "daskrl.cli", "serve", "--experiment", experiment, "--train-dir",
                             train_dir, "--port", "0", "--max-batch", str(args.max_batch), "--max-wait-ms",
                             str(args.max_wait_ms)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = proc.stdout.readline()
        found = re.search(r"at (http://\S+):\s", line)
        if not found:
            raise RuntimeError(f"daskrl serve did not start: {line}")
        url, results = found.group(1), []
        for clients in parse_counts(args.clients):
            before = get_stats(url)
            result = burst(clients, args.requests, http_client(url))
            results.append({"mode": "http", **result, "rows_per_pass": rows_per_pass(before, get_stats(url))})
            show(results[-1])
        return results
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.communicate(timeout=60)


def bench_dask(args: argparse.Namespace, client, train_dir: str, experiment: str) -> list[dict]:
    results = []
    with daskrl.serve(experiment, client, train_dir=train_dir, max_batch=args.max_batch,
                      max_wait_ms=args.max_wait_ms) as server:
        for clients in parse_counts(args.dask_clients):
            before = server.stats()
            result = burst(clients, args.dask_requests, lambda: server.act)
            results.append({"mode": "dask", **result, "rows_per_pass": rows_per_pass(before, server.stats())})
            show(results[-1])
    return results


def policy_alone(train_dir: str, experiment: str, max_batch: int, repeats: int = 200) -> list[dict]:
    """The forward pass alone, at batch 1 and at ``max_batch``: actions/s of the network on this machine."""
    from daskrl.evaluation import load_policy

    _, model, _ = load_policy(os.path.join(train_dir, experiment))
    out = []
    for batch in sorted({1, max_batch}):
        obs = np.random.default_rng(0).normal(0, 0.1, (batch, 4)).astype(np.float32)
        model.act(obs)
        t0 = time.perf_counter()
        for _ in range(repeats):
            model.act(obs)
        out.append({"mode": "policy alone", "batch": batch,
                    "actions_per_s": round(batch * repeats / (time.perf_counter() - t0), 1)})
        print(f"  policy alone, batch {batch:5d}: {out[-1]['actions_per_s']:12,.0f} actions/s", flush=True)
    return out


def parse_counts(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def show(r: dict) -> None:
    print(f"  {r['mode']:5s} {r['clients']:4d} clients: {r['actions_per_s']:10,.0f} actions/s, p50 {r['p50_ms']:7.2f} ms, "
          f"p99 {r['p99_ms']:7.2f} ms, {r['rows_per_pass']:6.2f} rows/pass", flush=True)


def train_policy(client, train_dir: str, steps: int) -> str:
    config = Config.from_flat({"env": "CartPole-v1", "train_dir": train_dir, "experiment": "bench_serve", "num_workers": 1,
                               "dashboard_address": "", "train_for_env_steps": steps, "overwrite": True})
    daskrl.train(config, client=client)
    return "bench_serve"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="1,8,32", help="concurrent HTTP clients, one burst each")
    parser.add_argument("--requests", type=int, default=4000, help="requests per HTTP burst")
    parser.add_argument("--dask-clients", default="1,8", help="concurrent Dask-client threads, one burst each")
    parser.add_argument("--dask-requests", type=int, default=2000, help="requests per Dask-client burst")
    parser.add_argument("--max-batch", type=int, default=256)
    parser.add_argument("--max-wait-ms", type=float, default=2.0)
    parser.add_argument("--train-steps", type=int, default=20_000, help="env steps of the policy trained first")
    parser.add_argument("--experiment", default="", help="serve this experiment instead of training one")
    parser.add_argument("--train-dir", default="", help="where --experiment is (default: a temporary directory)")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp, connect_cluster(n_workers=2, dashboard_address=None) as session:
        train_dir = args.train_dir or tmp
        experiment = args.experiment or train_policy(session.client, train_dir, args.train_steps)
        print(f"serving CartPole ({experiment}), {cores} cores, max batch {args.max_batch}, max wait "
              f"{args.max_wait_ms} ms", flush=True)
        results = policy_alone(train_dir, experiment, args.max_batch)
        results += bench_http(args, train_dir, experiment)
        results += bench_dask(args, session.client, train_dir, experiment)
    if args.json:
        print(json.dumps({"benchmark": "serve", "cores": cores, "max_batch": args.max_batch,
                          "max_wait_ms": args.max_wait_ms, "results": results}))


if __name__ == "__main__":
    main()
