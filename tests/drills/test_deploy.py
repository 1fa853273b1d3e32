"""Deployment: clusters started with the ``dask`` command, several hosts, and TLS.

1. An existing cluster (``dask scheduler`` + three ``dask worker`` processes): training through
   ``daskrl.train`` with ``--scheduler``, role pinning by worker resources, a clear error for too few
   workers, and a cluster that is still there and usable afterwards.
2. Two hosts: two Linux network namespaces, each with its own address, joined by a bridge; the driver (this
   process) reaches them through a veth end with an address of the same private test range. Same-host handoffs
   must use shared memory and cross-host ones Dask comms, as the components' statistics show.
3. TLS: a TLS-only cluster, a run with ``--tls-ca-file/--tls-cert/--tls-key``, and clients without (or with
   untrusted) credentials refused with one readable line, within a bounded time.

Every process a test starts is killed in teardown, and checked gone; the namespaces are deleted.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daskrl import Observer, train
from daskrl.config import ConfigError
from daskrl.errors import ClusterAccessError
from daskrl.runtime import dask_internals
from daskrl.runtime.access.cluster import connect_cluster
from daskrl.runtime.access.existing_cluster import tls_security
from daskrl.runtime.memory.shm import list_segments, owner_pid

from ..helpers import (
    Processes,
    components_of,
    dask_command,
    free_port,
    run_config,
    slow,
    start_cli_cluster,
    start_two_hosts,
    wait_for_cluster,
    worker_names,
    worker_pids,
)

pytestmark = slow("clusters of dask CLI processes, network namespaces and TLS")

# ---- helpers: the cluster's registry and segments (the rest are in helpers.py) ----


def components(client) -> dict[str, dict]:
    """The daskrl component registry on the scheduler: name -> address, class, ..."""
    return components_of(client)


def segments_of(pids: set[int]) -> list[str]:
    return [name for name in list_segments() if owner_pid(name) in pids]


# ---- 1. an existing cluster started from the command line ----


@pytest.fixture(scope="module")
def cli_cluster(tmp_path_factory):
    """``dask scheduler`` and three ``dask worker`` processes; w2 offers the ``learner`` resource."""
    with start_cli_cluster(tmp_path_factory.mktemp("cli_cluster"), 3,
                           lambda i: ["--resources", "learner=1"] if i == 2 else []) as cluster:
        yield {**cluster, "pids": worker_pids(cluster["client"])}


def test_too_few_workers_is_a_config_error_before_anything_is_created(cli_cluster, tmp_path):
    client = cli_cluster["client"]
    # a fixed fleet (an elastic run, the default with --scheduler, starts with the rollout workers that fit)
    config = run_config(tmp_path, "too_few", scheduler=cli_cluster["address"], num_workers=3, elastic=False)  # needs 4
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=r"the cluster has 3 worker processes but this run needs 4") as info:
        train(config)
    assert time.monotonic() - t0 < 60
    assert "--num-workers" in str(info.value)
    assert components(client) == {}, "components were created before the placement was checked"
    tasks = client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks))
    assert tasks == 0, "actors or tasks were created"
    assert segments_of(cli_cluster["pids"]) == []
    assert not (tmp_path / "too_few" / "checkpoints").exists() or \
        not list((tmp_path / "too_few" / "checkpoints").iterdir())
    assert len(dask_internals.cluster_workers(client)) == 3


def test_trains_on_an_existing_cluster_which_stays_usable(cli_cluster, tmp_path):
    from distributed import Client

    client, address = cli_cluster["client"], cli_cluster["address"]
    config = run_config(tmp_path, "existing", scheduler=address, stop_at_return=150, train_for_seconds=120)
    placements: list[dict[str, str]] = []

    def on_report(row: dict) -> None:
        if not placements:  # which worker (by name) runs which component, from the scheduler's registry
            names = worker_names(client)
            placements.append({c: names.get(info["address"], "?") for c, info in components(client).items()})

    summary = train(config, on_report=on_report)

    assert summary["episode_return_mean"] >= 150, summary
    assert "stop-at-return" in summary["stop_reason"]
    assert placements, "no report during the run"
    where = placements[0]
    assert where["learner"] == "w2", f"the worker with --resources learner=1 did not get the learner: {where}"
    assert sorted(where[c] for c in ("rollout_0", "rollout_1")) == ["w0", "w1"], where
    # one host: every handoff in place
    path = summary["data_path"]
    assert path["slots_comms"] == 0 and path["slots_shm"] > 0, path
    assert path["params_comms_reads"] == 0 and path["params_shm_reads"] > 0 and not path["remote_params"], path
    # the rollout workers acted on the numpy path from the published weights: their processes never imported torch
    # (only the learner's did: 100 MB and 0.7 s that a sampling-only worker of a cluster does not pay)
    names = worker_names(client)
    imported = {names[a]: has for a, has in client.run(lambda: "torch" in __import__("sys").modules).items()}
    assert imported == {"w0": False, "w1": False, "w2": True}, imported

    # The cluster is still there and usable by anyone; daskrl left nothing behind on it.
    assert all(p.poll() is None for p in cli_cluster["procs"].procs.values())
    with Client(address, timeout=10) as other:
        assert other.submit(lambda x: x + 1, 41, pure=False).result(timeout=30) == 42
        assert sorted(worker_names(other).values()) == ["w0", "w1", "w2"]
        assert worker_pids(other) == cli_cluster["pids"], "a worker process was restarted"
        assert components(other) == {}
    assert segments_of(cli_cluster["pids"]) == []


def test_a_killed_driver_leaves_nothing_running_on_the_cluster(cli_cluster, tmp_path):
    """SIGKILL the driver of a run on an existing cluster: Dask releases its actors, and their components stop
    (threads, shared memory, registry names) instead of stepping envs on a cluster that outlives the run."""
    client, pids = cli_cluster["client"], cli_cluster["pids"]
    procs = Processes(tmp_path)
    driver = procs.start("driver", sys.executable, "-m", "daskrl", "train", "--env", "CartPole-v1",
                         "--scheduler", cli_cluster["address"], "--train-for-seconds", "120",
                         "--train-dir", str(tmp_path), "--experiment", "killed", "--dashboard-address", "")
    try:
        deadline = time.monotonic() + 90
        while "env steps" not in procs.log("driver"):
            assert driver.poll() is None and time.monotonic() < deadline, f"no progress: {procs.log('driver')}"
            time.sleep(0.3)
        assert {"learner", "rollout_0", "rollout_1"} <= set(components(client))
        assert segments_of(pids), "the run keeps its trajectories in shared memory"
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
        deadline = time.monotonic() + 30
        while components(client) or segments_of(pids):
            assert time.monotonic() < deadline, \
                f"still there 30 s after the driver died: {sorted(components(client))}, {segments_of(pids)}"
            time.sleep(0.5)
    finally:
        assert procs.stop() == []
    assert worker_pids(client) == pids, "a worker process was restarted"
    assert client.submit(lambda x: x + 1, 41, pure=False).result(timeout=30) == 42


# ---- 2. two hosts: network namespaces joined by a bridge ----


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory):
    """Scheduler, a learner-pinned worker and a rollout worker on host 1; a rollout worker on host 2."""
    with start_two_hosts(tmp_path_factory.mktemp("two_hosts"), [(0, "a-learner", ["--resources", "learner=1"]),
                                                                 (0, "a-rollout", []), (1, "b-rollout", [])]) as hosts:
        yield hosts


def test_two_hosts_shared_memory_within_a_host_and_comms_across(two_hosts, tmp_path):
    client = two_hosts["client"]
    h1, h2 = two_hosts["net"].hosts
    hosts_by_name = {n: a.split("://")[1].rsplit(":", 1)[0] for a, n in worker_names(client).items()}
    assert hosts_by_name == {"a-learner": h1, "a-rollout": h1, "b-rollout": h2}

    # today's direct path (tests/drills/test_param_relay.py covers the host relays, the default)
    config = run_config(tmp_path, "two_hosts", scheduler=two_hosts["address"], stop_at_return=150,
                        train_for_seconds=120, param_relay="off")
    summary = train(config)

    assert summary["episode_return_mean"] >= 150, summary
    assert "stop-at-return" in summary["stop_reason"]
    path = summary["data_path"]
    parts = path["components"]
    assert parts["learner"]["host"] == h1 and path["remote_params"], path
    by_host = {parts[c]["host"]: c for c in ("rollout_0", "rollout_1")}
    assert set(by_host) == {h1, h2}, path
    near, far = parts[by_host[h1]], parts[by_host[h2]]
    # parameters: the same-host rollout worker reads them in place, the other one pulls them over comms
    assert near["params_shm_reads"] > 0 and near["params_comms_reads"] == 0, path
    assert far["params_comms_reads"] > 0 and far["params_shm_reads"] == 0, path
    # trajectories: the batcher copies slots of both, in place and over comms
    assert path["slots_shm"] > 0 and path["slots_comms"] > 0, path
    assert path["hosts"] == sorted([h1, h2]), path


class JoinOnceTrainingThenStopOnceFed(Observer):
    """Starts a worker on host 2 once the run trains; stops the run once the rollout worker grown there has read
    parameters from the relay its host was given and the learner took its slots."""

    def __init__(self, hosts: dict) -> None:
        self.hosts, self.started = hosts, False

    def on_report(self, run, row) -> None:
        net = self.hosts["net"]
        if not self.started and row["env_steps"] > 0:
            self.started = True
            self.hosts["procs"].start("c-joiner", "ip", "netns", "exec", net.ns[1], dask_command(), "worker",
                                      self.hosts["address"], "--host", net.hosts[1], "--nworkers", "1", "--nthreads",
                                      "1", "--name", "c-joiner")
        path = run.data_path()
        grown = [name for name, c in path.get("components", {}).items() if c.get("host") == net.hosts[1]]
        if any(path["components"][n].get("params_relay_reads", 0) > 0 and path["slots_taken"].get(n, 0) > 0
               for n in grown):
            run.request_stop("the far rollout worker is fed")


def test_an_elastic_run_grows_onto_another_host_and_its_parameters_follow(two_hosts, tmp_path):
    """A run on host 1 alone (learner and one rollout worker, parameters in shared memory only); a worker that joins
    on host 2 gets a rollout worker, the learner starts publishing over comms for it, and its host gets a relay
    (which shares the joiner's process), from whose block it reads in place."""
    client, procs = two_hosts["client"], two_hosts["procs"]
    h1, h2 = two_hosts["net"].hosts
    config = run_config(tmp_path, "grow_across", scheduler=two_hosts["address"], num_workers=1,
                        train_for_seconds=120, train_for_env_steps=0, report_interval=0.5)
    try:
        summary = train(config, observers=[JoinOnceTrainingThenStopOnceFed(two_hosts)])
    finally:
        if "c-joiner" in procs.procs:
            os.killpg(procs.procs["c-joiner"].pid, signal.SIGTERM)
            procs.procs["c-joiner"].wait(30)
    assert summary["stop_reason"] == "the far rollout worker is fed", summary["stop_reason"]
    [grew] = [e for e in summary["elastic"] if e["event"] == "grew"]
    assert grew["address"].startswith(f"tcp://{h2}:"), grew
    path = summary["data_path"]
    far = path["components"][grew["component"]]
    assert far["host"] == h2 and far["params_relay_reads"] > 0 and path["remote_params"], path
    assert path["components"]["relay_0"]["host"] == h2 and path["params_relay_fetches"] > 0, path
    assert path["components"]["rollout_0"]["params_shm_reads"] > 0 and path["slots_comms"] > 0, path
    assert path["slots_taken"][grew["component"]] > 0
    assert len(dask_internals.cluster_workers(client)) == 3  # the joiner left again


# ---- 3. TLS ----


def make_certificates(directory: Path, name: str, hosts: list[str]) -> dict[str, str]:
    """A throwaway CA and a certificate/key pair it signs (``cryptography``, else the ``openssl`` command)."""
    paths = {k: str(directory / f"{name}-{k}.pem") for k in ("ca", "cert", "key")}
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        return _openssl_certificates(directory, name, paths)
    now = datetime.datetime.now(datetime.timezone.utc)
    valid = (now - datetime.timedelta(hours=1), now + datetime.timedelta(days=2))

    def subject(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(subject(f"{name} test CA")).issuer_name(subject(f"{name} test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(valid[0]).not_valid_after(valid[1])
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    names = [x509.DNSName("localhost")] + [x509.IPAddress(ipaddress.ip_address(h)) for h in hosts]
    cert = (x509.CertificateBuilder().subject_name(subject(f"{name} node")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(valid[0]).not_valid_after(valid[1])
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .sign(ca_key, hashes.SHA256()))
    Path(paths["ca"]).write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    Path(paths["cert"]).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    Path(paths["key"]).write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                     serialization.NoEncryption()))
    os.chmod(paths["key"], 0o600)
    return paths


def _openssl_certificates(directory: Path, name: str, paths: dict[str, str]) -> dict[str, str]:
    if shutil.which("openssl") is None:
        pytest.skip("making test certificates needs the `cryptography` package or the `openssl` command")
    ca_key = str(directory / f"{name}-ca-key.pem")
    csr = str(directory / f"{name}.csr")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", ca_key,
        "-out", paths["ca"], "-days", "2", "-subj", f"/CN={name} test CA")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", paths["key"],
        "-out", csr, "-subj", f"/CN={name} node")
    run("x509", "-req", "-in", csr, "-CA", paths["ca"], "-CAkey", ca_key, "-CAcreateserial", "-out", paths["cert"],
        "-days", "2")
    return paths


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    """A TLS-only cluster (scheduler + 3 workers, all with the test CA's certificate); encryption required."""
    tmp = tmp_path_factory.mktemp("tls_cluster")
    certs = make_certificates(tmp, "good", ["127.0.0.1"])
    procs = Processes(tmp)
    port = free_port()
    address = f"tls://127.0.0.1:{port}"
    tls = ["--tls-ca-file", certs["ca"], "--tls-cert", certs["cert"], "--tls-key", certs["key"]]
    env = {"DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True"}
    dask = dask_command()
    client = None
    try:
        procs.start("scheduler", dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--protocol", "tls",
                    "--dashboard-address", "127.0.0.1:0", *tls, env=env)
        for i in range(3):
            procs.start(f"t{i}", dask, "worker", address, "--protocol", "tls", "--nworkers", "1", "--nthreads", "1",
                        "--name", f"t{i}", *tls, env=env)
        security = tls_security(certs["ca"], certs["cert"], certs["key"])
        client = wait_for_cluster(address, 3, procs, security=security)
        yield {"address": address, "port": port, "certs": certs, "client": client, "tmp": tmp}
    finally:
        if client is not None:
            client.close()
        left = procs.stop()
        assert left == [], f"processes left running: {left}"


def test_trains_on_a_tls_cluster_with_the_cli_flags(tls_cluster, tmp_path, capsys):
    from daskrl.cli import main

    certs, address = tls_cluster["certs"], tls_cluster["address"]
    rc = main(["train", "--scheduler", address, "--tls-ca-file", certs["ca"], "--tls-cert", certs["cert"],
               "--tls-key", certs["key"], "--train-dir", str(tmp_path), "--experiment", "tls",
               "--train-for-env-steps", "20000", "--train-for-seconds", "90", "--dashboard-address", "",
               "--report-interval", "1"])
    out = capsys.readouterr()
    assert rc == 0, out.out[-2000:] + out.err[-2000:]
    assert "daskrl: trained" in out.out and "reached" in out.out, out.out[-2000:]
    rows = (tmp_path / "tls" / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    assert int(rows[-1].split(",")[header.index("env_steps")]) >= 20_000
    client = tls_cluster["client"]
    addresses = [client.scheduler.address, *dask_internals.cluster_workers(client)]
    assert all(a.startswith("tls://") for a in addresses), addresses  # nothing listens in the clear
    assert components(client) == {}


def test_tls_cluster_refuses_clients_without_credentials(tls_cluster, tmp_path, capsys):
    from daskrl.cli import main

    address, port = tls_cluster["address"], tls_cluster["port"]
    # train() with the tls:// address and no certificates: one clear line, at once
    t0 = time.monotonic()
    with pytest.raises(ClusterAccessError, match="TLS credentials are needed") as info:
        train(run_config(tmp_path, "no_certs", scheduler=address, train_for_env_steps=1000))
    assert time.monotonic() - t0 < 30
    message = str(info.value)
    assert "\n" not in message and "--tls-ca-file" in message and address in message, message

    # the CLI says the same in one line and exits 2
    rc = main(["train", "--scheduler", address, "--train-dir", str(tmp_path), "--experiment", "no_certs_cli",
               "--train-for-env-steps", "1000", "--dashboard-address", ""])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "TLS credentials are needed" in err, err

    # plain TCP to the TLS port: refused, with a hint at TLS
    t0 = time.monotonic()
    with pytest.raises(ClusterAccessError, match=r"tls:// address") as info:
        connect_cluster(f"tcp://127.0.0.1:{port}", timeout=10)
    assert time.monotonic() - t0 < 15 and "\n" not in str(info.value)

    # a certificate from another CA: the handshake fails, within the timeout
    other = make_certificates(tls_cluster["tmp"], "other", ["127.0.0.1"])
    t0 = time.monotonic()
    with pytest.raises(ClusterAccessError, match="TLS handshake failed") as info:
        connect_cluster(address, security=tls_security(other["ca"], other["cert"], other["key"]), timeout=5)
    assert time.monotonic() - t0 < 15 and "\n" not in str(info.value)

    # missing files are named before anything starts
    with pytest.raises(ClusterAccessError, match=r"--tls-key '/nonexistent/key.pem' is not a file"):
        tls_security(tls_cluster["certs"]["ca"], tls_cluster["certs"]["cert"], "/nonexistent/key.pem")
    assert components(tls_cluster["client"]) == {}


def test_embedded_cluster_uses_tls_when_given_credentials(tls_cluster):
    certs = tls_cluster["certs"]
    with connect_cluster(n_workers=1, dashboard_address=None,
                         security=tls_security(certs["ca"], certs["cert"], certs["key"])) as session:
        client = session.client
        addresses = [client.scheduler.address, *dask_internals.cluster_workers(client)]
        assert all(a.startswith("tls://") for a in addresses), addresses
        assert client.submit(lambda: "over TLS", pure=False).result(timeout=30) == "over TLS"
