"""Links that behave like networks: training over 1, 2 and 4 network-namespace hosts whose links are shaped with
``tc``, for CartPole and an image env (``bench_scale.py --links``).

Each link profile is a rate and a one-way delay on every veth of the hosts' bridge (both ends: a frame crosses two
shaped queues from one host to another): ``veth`` (unshaped), ``10gbit`` (10 Gbit/s, 0.1 ms: a datacentre link) and
``1gbit`` (1 Gbit/s, 1 ms). The delay needs the kernel's netem qdisc; where ``tc`` refuses it ("Specified qdisc kind
is unknown": a kernel built without CONFIG_NET_SCH_NETEM), the rate alone is shaped with tbf and the table says the
delay was not applied. For each profile and host count: the learner on host 1, three rollout workers (on host 1
for one host; hosts 1, 2, 2 for two; hosts 2, 3, 4 for four), the run's env steps/s over the measured window, its
mean policy lag, and the bytes that crossed the bridge per env step trained (every frame forwarded between hosts,
counted on the bridge's ports).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass

from bench_scale import PREFIX, NetnsCluster, WindowProbe, measure

#: profile -> (tbf/netem rate, one-way delay in ms); None: the veth as it is
LINKS: dict[str, tuple[str, float] | None] = {"veth": None, "10gbit": ("10gbit", 0.1), "1gbit": ("1gbit", 1.0)}
#: env -> its options for this benchmark (an image env with fewer envs per worker: a core samples ~2k frames/s)
TASKS = {"CartPole-v1": {}, "atari/Pong": {"num_envs_per_worker": 8}}
#: the host of each rollout worker, by host count (the learner is on host 1)
ROLLOUT_HOSTS = {1: (1, 1, 1), 2: (1, 2, 2), 4: (2, 3, 4)}


@dataclass
class Shaped:
    rate: str
    delay_ms: float
    delay_applied: bool
    note: str = ""


def link_devices(hosts: int) -> list[tuple[str, str]]:
    """(namespace, device) of every veth end on the bridge's links: the bridge's ports in host 1, each other host's
    end, and the driver's link (its end in host 1; the other end is in this namespace)."""
    first = f"{PREFIX}_h1"
    out = [(first, f"{PREFIX}_r1"), ("", f"{PREFIX}_r0")]
    for i in range(2, hosts + 1):
        out += [(first, f"{PREFIX}_a{i}"), (f"{PREFIX}_h{i}", f"{PREFIX}_b{i}")]
    return out


def shape(hosts: int, rate: str, delay_ms: float) -> Shaped:
    """Rate and delay on every link device (netem); where the kernel has no netem, the rate alone (tbf)."""
    devices = link_devices(hosts)
    tried = _tc(devices[0], "netem", "delay", f"{delay_ms}ms", "rate", rate)
    if tried.returncode == 0:
        for device in devices[1:]:
            _tc(device, "netem", "delay", f"{delay_ms}ms", "rate", rate, check=True)
        return Shaped(rate, delay_ms, True)
    for device in devices:
        _tc(device, "tbf", "rate", rate, "burst", "512kb", "latency", "50ms", check=True)
    return Shaped(rate, delay_ms, False, f"delay not applied: tc netem: {tried.stderr.strip()}")


def _tc(device: tuple[str, str], *qdisc: str, check: bool = False) -> subprocess.CompletedProcess:
    ns, dev = device
    cmd = (["ip", "netns", "exec", ns] if ns else []) + ["tc", "qdisc", "replace", "dev", dev, "root", *qdisc]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    if check and out.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()}")
    return out


def bridge_bytes(hosts: int) -> int:
    """Bytes the bridge has forwarded so far: what its ports transmitted (each forwarded frame leaves on one)."""
    first = f"{PREFIX}_h1"
    ports = [f"{PREFIX}_r1", *(f"{PREFIX}_a{i}" for i in range(2, hosts + 1))]
    total = 0
    for port in ports:
        out = subprocess.run(["ip", "netns", "exec", first, "cat", f"/sys/class/net/{port}/statistics/tx_bytes"],
                             capture_output=True, text=True, timeout=20)
        total += int(out.stdout.strip() or 0)
    return total


class LinkProbe(WindowProbe):
    """:class:`WindowProbe`, plus the policy lag of each row and the bridge's bytes at each row."""

    def __init__(self, warmup: float, seconds: float, hosts: int) -> None:
        super().__init__(warmup, seconds)
        self.hosts = hosts
        self.lags: list[tuple[float, float]] = []
        self.bytes: list[tuple[float, int]] = []

    def __call__(self, row: dict) -> None:
        super().__call__(row)
        if row["env_steps"] > 0:
            now = time.monotonic()
            lag = row.get("policy_lag")
            if lag is not None and lag == lag:
                self.lags.append((now, float(lag)))
            self.bytes.append((now, bridge_bytes(self.hosts)))

    def window_stats(self) -> tuple[float, float]:
        """(mean policy lag, bridge bytes per env step) over the measured window."""
        if len(self.points) < 2:
            return float("nan"), float("nan")
        start = self.points[0][0] + self.warmup
        end = start + self.seconds + 0.5
        lags = [lag for t, lag in self.lags if start <= t <= end]
        steps = [(t, s) for t, s in self.points if start <= t <= end]
        sent = [(t, b) for t, b in self.bytes if start <= t <= end]
        per_step = ((sent[-1][1] - sent[0][1]) / (steps[-1][1] - steps[0][1])
                    if len(steps) > 1 and len(sent) > 1 and steps[-1][1] > steps[0][1] else float("nan"))
        return (sum(lags) / len(lags) if lags else float("nan")), per_step


def measure_link(profile: str, hosts: int, env: str, seconds: float, warmup: float) -> dict:
    with NetnsCluster(hosts) as cluster:
        link = LINKS[profile]
        shaped = shape(hosts, *link) if link is not None and hosts > 1 else None
        cluster.worker(1, "a-learner", "--resources", "learner=1")
        for i, host in enumerate(ROLLOUT_HOSTS[hosts]):
            cluster.worker(host, f"r{i}-h{host}")
        cluster.wait_for_workers(1 + len(ROLLOUT_HOSTS[hosts]))
        probe = LinkProbe(warmup, seconds, hosts)
        out = measure(seconds, warmup, probe=probe, env=env, scheduler=cluster.address,
                      num_workers=len(ROLLOUT_HOSTS[hosts]), **TASKS[env])
    lag, per_step = probe.window_stats()
    return {"link": profile, "hosts": hosts, "env": env, "fps": out["fps"], "policy_lag": lag,
            "bridge_bytes_per_step": per_step, "rate": shaped.rate if shaped else None,
            "delay_ms": shaped.delay_ms if shaped else None,
            "delay_applied": shaped.delay_applied if shaped else None, "note": shaped.note if shaped else ""}


def links_main(seconds: float, warmup: float, envs: list[str]) -> list[dict]:
    if shutil.which("tc") is None:
        raise SystemExit("--links needs tc (iproute2)")
    lines = []
    for env in envs:
        for profile in LINKS:
            for hosts in (1, 2, 4):
                if hosts == 1 and profile != "veth":
                    continue  # one host: nothing crosses a link
                lines.append(measure_link(profile, hosts, env, seconds, warmup))
                print(f"  {env} {profile} {hosts} host(s): {lines[-1]['fps']:,.0f} env steps/s", flush=True)
    return lines


def print_links(lines: list[dict]) -> None:
    print("| env | link | hosts | env steps/s | policy lag (mean) | bridge bytes per env step | shaping |")
    print("|---|---|---:|---:|---:|---:|---|")
    for x in lines:
        how = "none" if x["rate"] is None else (f"{x['rate']}, {x['delay_ms']:g} ms" +
                                                ("" if x["delay_applied"] else " (rate only: no netem)"))
        print(f"| {x['env']} | {x['link']} | {x['hosts']} | {x['fps']:,.0f} | {x['policy_lag']:.2f} | "
              f"{x['bridge_bytes_per_step']:,.0f} | {how} |")
