"""The control-plane simulation of ``benchmarks/bench_scale.py --simulate`` (benchmarks/scale_simulation.py): the
scheduler's op counts on a real scheduler, the numbers of a measured window from two readings, and (slow, root) one
short simulated run on 8 network-namespace hosts that leaves no namespace, process or segment behind, also when the
benchmark is killed (SIGKILL: its watchdog removes them)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from distributed import Client, LocalCluster, Variable

from daskrl.runtime.cleanup.segments import list_segments, owner_pid, pid_alive
from daskrl.testing.scheduler_load import install_op_counts, read_op_counts

from ..helpers import slow, wait_for

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import scale_simulation  # noqa: E402


def test_the_scheduler_counts_every_request_and_stream_message_by_op():
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        with pytest.raises(RuntimeError, match="not installed"):
            client.run_on_scheduler(read_op_counts)
        assert client.run_on_scheduler(install_op_counts)["pid"] > 0
        variable = Variable("polled", client=client)
        variable.set(1)
        before = client.run_on_scheduler(read_op_counts)
        for _ in range(7):
            variable.get(timeout=5)
        client.submit(sum, [1, 2]).result()
        client.run_on_scheduler(install_op_counts)  # a second install keeps the counts
        after = client.run_on_scheduler(read_op_counts)
    assert after["variable_get"] - before.get("variable_get", 0) == 7
    assert after["variable_set"] == 1
    assert after.get("stream:update-graph", 0) >= 1  # the client's batched stream: the submitted task
    assert any(op.startswith("stream:") and op != "stream:update-graph" for op in after), after  # the worker's


def reading(t: float, env_steps: int, cpu_s: float, counts: dict, lags: list, batcher: dict) -> dict:
    return {"t": t, "env_steps": env_steps, "scheduler": {"t": t, "cpu_s": cpu_s, "counts": counts},
            "learner": {"policy_lag_counts": lags, "batcher": batcher}}


def test_a_window_is_the_difference_of_two_readings():
    start = reading(10.0, 1_000, 3.0, {"variable_get": 100, "stream:heartbeat": 5},
                    [50, 10], {"slots_shm": 4, "slots_comms": 2, "copy_s_shm": 0.001, "copy_s_comms": 0.004})
    end = reading(14.0, 9_000, 5.0, {"variable_get": 500, "stream:heartbeat": 25, "variable_set": 8},
                  [80, 20, 0, 10], {"slots_shm": 14, "slots_comms": 12, "copy_s_shm": 0.002, "copy_s_comms": 0.024})
    got = scale_simulation.window_numbers(start, end, slot_frames=64)
    assert got["fps"] == 2_000 and got["scheduler_cpu_share"] == 0.5
    assert got["parameter_polls_per_s"] == 100 and got["scheduler_messages_per_s"] == (400 + 20 + 8) / 4
    assert list(got["scheduler_ops_per_s"]) == ["variable_get", "stream:heartbeat", "variable_set"]
    # window lags: 30 at 0, 10 at 1, 10 at 3 -> median 0, 95th percentile 3
    assert got["samples_trained"] == 50 and got["policy_lag_p50"] == 0 and got["policy_lag_p95"] == 3
    assert got["copy_us_per_frame_shm"] == pytest.approx(1e6 * 0.001 / (10 * 64))
    assert got["copy_us_per_frame_comms"] == pytest.approx(1e6 * 0.020 / (10 * 64))
    assert got["copy_us_per_frame"] == pytest.approx(1e6 * 0.021 / (20 * 64))
    idle = scale_simulation.window_numbers(start, reading(14.0, 1_000, 3.0, start["scheduler"]["counts"], [50, 10],
                                                          start["learner"]["batcher"]), slot_frames=64)
    assert idle["policy_lag_p95"] is None and idle["copy_us_per_frame"] is None and idle["fps"] == 0


@slow("4 network-namespace hosts, a dask scheduler and 4 dask workers, a short training run")
def test_a_short_simulation_measures_the_control_plane_and_leaves_nothing_behind():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and the `ip` command (iproute2)")
    before = set(list_segments())
    out = subprocess.run([sys.executable, str(BENCHMARKS / "bench_scale.py"), "--simulate", "4", "--seconds", "2",
                          "--warmup", "1", "--json"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    [run] = [r for r in result["runs"] if r["design"] == "off"]
    assert "error" not in run, run
    assert run["fps"] > 0 and run["samples_trained"] > 0 and run["policy_lag_p95"] >= run["policy_lag_p50"] >= 0
    assert 0 < run["scheduler_cpu_share"] < 2 and run["scheduler_messages_per_s"] > 0
    assert run["parameter_polls_per_s"] > 0  # rollout workers on hosts 2..4 poll the scheduler (param_relay off)
    assert run["slots_comms"] > 0 and run["copy_us_per_frame_comms"] > 0
    if not scale_simulation.relay_available():
        assert "auto" in result["unavailable"] and "no param_relay option" in out.stdout
    else:  # a relay per host: the scheduler hears no parameter poll at all
        [relayed] = [r for r in result["runs"] if r["design"] == "auto"]
        assert "error" not in relayed and relayed["fps"] > 0 and relayed["parameter_polls_per_s"] == 0, relayed
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "daskrlb_h" not in listed
    assert not subprocess.run(["pgrep", "-f", "tcp://10.77.1.1:8786"], capture_output=True).stdout
    assert not subprocess.run(["pgrep", "-f", "netns_watchdog.py"], capture_output=True).stdout  # ended with it
    left = [name for name in set(list_segments()) - before if not pid_alive(owner_pid(name) or 0)]
    assert not left, left  # segments of our dead workers (another live process's are not ours to judge)


@slow("4 network-namespace hosts and 4 dask workers, a benchmark killed while it trains")
def test_a_killed_simulation_leaves_nothing_behind(tmp_path):
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and the `ip` command (iproute2)")
    log = tmp_path / "out.log"
    with open(log, "w") as out:
        bench = subprocess.Popen([sys.executable, str(BENCHMARKS / "bench_scale.py"), "--simulate", "4", "--seconds",
                                  "60", "--warmup", "60"], stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "env steps" in log.read_text(), timeout=300, interval=0.5, what="the simulation training")
    finally:
        bench.kill()
        bench.wait(30)

    def gone() -> bool:
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        return "daskrlb_h" not in listed and not subprocess.run(["pgrep", "-f", "tcp://10.77.1.1:8786|netns_watchdog"],
                                                                  capture_output=True).stdout

    wait_for(gone, timeout=60, interval=0.5, what="the watchdog's cleanup")
