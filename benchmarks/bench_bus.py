"""Topic bus against Dask actor calls, and shared-memory handoff against actor-method arguments.

Run:  python benchmarks/bench_bus.py [--json]

Everything runs on one embedded LocalCluster with two worker processes (sender on one, receiver on the
other), one thing at a time, and the ratios are printed side by side.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from daskrl.runtime import connect, connect_cluster, dask_internals, spawn
from daskrl.testing.components import Bencher, Receiver


def wait_for(receiver, key: str, n: int, timeout: float = 120.0) -> dict:
    """Poll (cheaply: counts only) until ``n`` signals or handoffs arrived, then fetch the delays."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        res = receiver.call("results")
        if res[key] >= n:
            return receiver.call("results", with_delays=True)
        time.sleep(0.05)
    raise TimeoutError(f"only {res[key]} of {n} {key} arrived")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args()

    with connect_cluster(n_workers=2, dashboard_address=None) as session:
        client = session.client
        w0, w1 = sorted(dask_internals.cluster_workers(client))
        sender = spawn(client, Bencher, "bench_sender", run_id=session.run_id, worker=w0)
        receiver = spawn(client, Receiver, "bench_receiver", run_id=session.run_id, worker=w1)
        for h in (sender, receiver):
            h.call("start")
        connect(sender.tick, receiver.on_tick, client)
        connect(sender.handoff, receiver.on_handoff, client)

        # 1. bus throughput: a burst of small signals from one worker to a component on another
        n = args.messages
        sender.call("paced", n, 0.0)
        res = wait_for(receiver, "count", n)
        bus_rate = n / (res["last_arrival"] - res["first_sent"])
        receiver.call("reset")

        # 2. bus one-way latency, paced so nothing queues
        sender.call("paced", 2000, 0.002)
        res = wait_for(receiver, "count", 2000)
        delays_ms = np.asarray(res["delays"]) * 1e3
        receiver.call("reset")

        # 3. actor calls from the driver: pipelined throughput and round trip
        k = 5000
        t0 = time.perf_counter()
        futures = [receiver.actor.noop(i) for i in range(k)]
        for f in futures:
            f.result()
        actor_rate = k / (time.perf_counter() - t0)
        rtts = []
        for i in range(500):
            t = time.perf_counter()
            receiver.actor.noop(i).result()
            rtts.append((time.perf_counter() - t) * 1e3)

        # 4. handoffs of 1 MB and 64 MB: in place through shared memory vs as an actor-method argument
        handoff = {}
        for mb, reps in ((1, 30), (64, 10)):
            nbytes = mb * 2**20
            sender.call("shm_handoff", nbytes, reps)
            res = wait_for(receiver, "handoffs", reps)
            shm_ms = float(np.median(res["delays"])) * 1e3
            receiver.call("reset")
            arg = sender.call("actor_handoff", nbytes, reps, receiver.address, receiver.actor._key, timeout=300)
            handoff[mb] = (shm_ms, float(np.median(arg)) * 1e3)

        for h in (sender, receiver):
            h.call("stop")

    result = {
        "bus_msgs_per_s": round(bus_rate),
        "actor_msgs_per_s": round(actor_rate),
        "bus_p50_ms": round(float(np.percentile(delays_ms, 50)), 3),
        "bus_p99_ms": round(float(np.percentile(delays_ms, 99)), 3),
        "actor_rtt_p50_ms": round(float(np.percentile(rtts, 50)), 3),
        "shm_1mb_ms": round(handoff[1][0], 3),
        "actor_arg_1mb_ms": round(handoff[1][1], 3),
        "shm_64mb_ms": round(handoff[64][0], 3),
        "actor_arg_64mb_ms": round(handoff[64][1], 3),
    }
    rows = [
        ("messages/s, worker to worker", f"{bus_rate:,.0f}", f"{actor_rate:,.0f}", f"{bus_rate / actor_rate:.1f}x"),
        ("one-way latency p50 (ms)", f"{result['bus_p50_ms']:.3f}", f"{result['actor_rtt_p50_ms']:.3f} (round trip)", ""),
        ("one-way latency p99 (ms)", f"{result['bus_p99_ms']:.3f}", "", ""),
        ("1 MB handoff (ms)", f"{handoff[1][0]:.2f}", f"{handoff[1][1]:.2f}", f"{handoff[1][1] / handoff[1][0]:.1f}x"),
        ("64 MB handoff (ms)", f"{handoff[64][0]:.2f}", f"{handoff[64][1]:.2f}", f"{handoff[64][1] / handoff[64][0]:.1f}x"),
    ]
    print("| measure | daskrl (bus / shared memory) | Dask actor calls / arguments | ratio |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
