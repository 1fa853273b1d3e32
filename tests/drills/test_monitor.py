"""Monitoring on real parts: training runs, the scheduler's dashboard, headless Chromium, TensorBoard's reader.

The live page is a Bokeh *server* page: its plots arrive over a websocket after the page has loaded, and
``chromium --screenshot`` / ``--dump-dom`` capture at load (with ``--virtual-time-budget`` too: websockets do
not hold virtual time), so they only ever see the empty template. The live page is therefore driven over the
DevTools protocol (``--remote-debugging-port``, tornado's websocket client): wait until the plots hold data,
read the DOM (shadow roots included), then take the screenshot (``browser.Browser``). The static HTML report is
checked with plain ``--screenshot`` and ``--dump-dom``.
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from daskrl import Observer
from daskrl.config import Config
from daskrl.monitor.console import ConsoleView, progress_line
from daskrl.monitor.dashboard import DashboardPlugin, dashboard_page
from daskrl.monitor.figures.plots import EVAL_COLOR, FPS_COLOR, RETURN_COLOR
from daskrl.monitor.history import MetricsStore
from daskrl.monitor.outputs.tensorboard_log import TAGS
from daskrl.runtime import connect_cluster
from daskrl.runtime.memory.shm import list_segments, owner_pid

from ..browser import CHROMIUM, Browser, chromium_cli, colour_pixels, distinct_colours, needs_chromium
from ..helpers import free_port, get_json, run_config, slow, worker_pids

REPO = Path(__file__).resolve().parents[2]
#: a CartPole run that leaves CPU for the browser on a 2-core machine
LIGHT_CARTPOLE = {"env": "CartPole-v1", "num_workers": 1, "num_envs_per_worker": 8, "worker_num_splits": 2,
                  "report_interval": 1.0, "checkpoint_interval": 300.0}


# ---- helpers ----


class StopWhenAsked(Observer):
    """Stops the run in order at its next poll once :meth:`ask` was called (from another thread)."""

    def __init__(self) -> None:
        self.asked = threading.Event()

    def ask(self) -> None:
        self.asked.set()

    def on_poll(self, run) -> None:
        if self.asked.is_set():
            run.request_stop("the test's checks are done")


class Training:
    """``daskrl.train`` in a background thread; :meth:`stop` ends it before its budget."""

    def __init__(self, config: Config, client) -> None:
        from daskrl import train

        self.summary: dict | None = None
        self.error: BaseException | None = None
        self.stopper = StopWhenAsked()

        def run() -> None:
            try:
                self.summary = train(config, client=client, observers=[self.stopper])
            except BaseException as exc:  # reported by wait()
                self.error = exc

        self.thread = threading.Thread(target=run, name="daskrl-test-train", daemon=True)
        self.thread.start()

    @property
    def running(self) -> bool:
        return self.thread.is_alive()

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"training failed: {self.error!r}") from self.error

    def stop(self) -> None:
        self.stopper.ask()

    def wait(self, timeout: float = 120.0) -> dict:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "training did not stop in time"
        self.check()
        assert self.summary is not None
        return self.summary


def metric_value(base: str, name: str, run: str) -> float | None:
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as r:
        text = r.read().decode()
    for line in text.splitlines():
        m = re.match(rf'^{name}\{{(.*)\}} (\S+)$', line)
        if m and f'run="{run}"' in m.group(1):
            return float(m.group(2))
    return None


def wait_for_reports(base: str, run: str, training: Training, n: int = 2, timeout: float = 90.0) -> dict:
    """Poll /daskrl/api/latest until the run has at least ``n`` reports."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        training.check()
        try:
            history = get_json(f"{base}/daskrl/api/history?run={run}")
            if len(history["rows"]) >= n:
                return history
        except urllib.error.HTTPError as exc:
            assert exc.code == 404, exc  # the run has not reported yet
        time.sleep(0.5)
    raise AssertionError(f"no {n} reports of {run!r} on {base} within {timeout} s")


def check_endpoints_grow(base: str, run: str, training: Training) -> None:
    """While the run trains, env_steps on /daskrl/api/latest and on /metrics grow between two reads."""
    first = get_json(f"{base}/daskrl/api/latest?run={run}")
    first_metric = metric_value(base, "daskrl_env_steps", run)
    assert first["run"] == run and first["env"] == "CartPole-v1" and run in first["runs"]
    assert first_metric is not None and first_metric > 0
    for _ in range(30):
        time.sleep(0.5)
        later = get_json(f"{base}/daskrl/api/latest?run={run}")
        later_metric = metric_value(base, "daskrl_env_steps", run)
        if later["row"]["env_steps"] > first["row"]["env_steps"] and later_metric > first_metric:
            break
    else:
        raise AssertionError(f"env_steps did not grow: {first['row']} -> {later['row']}")
    assert training.running, "the run ended before the second read: the check proved nothing"
    row = later["row"]
    assert row["fps"] > 0 and row["policy_version"] >= 1
    assert "learner" in later["shares"] and "train" in later["shares"]["learner"], later["shares"]
    for gauge in ("daskrl_fps", "daskrl_policy_version", "daskrl_episode_return_mean", "daskrl_policy_lag"):
        assert metric_value(base, gauge, run) is not None, gauge
    history = get_json(f"{base}/daskrl/api/history?run={run}")
    steps = [r["env_steps"] for r in history["rows"]]
    assert len(steps) >= 2 and steps == sorted(steps)


def assert_no_segments_of(pids: set[int]) -> None:
    left = [name for name in list_segments() if owner_pid(name) in pids]
    assert not left, f"shared-memory segments left by this test's workers: {left}"


def group_members(pgid: int, grace: float = 15.0) -> list[str]:
    """Live processes of a process group after up to ``grace`` seconds (a nanny's helpers exit after it)."""
    deadline = time.monotonic() + grace
    while True:
        members = []
        for proc in psutil.process_iter(["status", "cmdline"]):  # one gone meanwhile: its fields None
            try:
                in_group = os.getpgid(proc.pid) == pgid  # psutil does not say a process's group
            except OSError:
                continue
            if in_group and proc.info["status"] not in (None, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                members.append(f"{proc.pid}: {' '.join(proc.info['cmdline'] or ())[:120]}")
        if not members or time.monotonic() > deadline:
            return members
        time.sleep(0.2)


# ---- headless Chromium ----


@pytest.fixture
def browser(tmp_path):
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    b = Browser(tmp_path)
    yield b
    b.close()


def check_live_page(browser: Browser, page: str, run: str, training: Training, tmp: Path) -> None:
    probe, png = browser.inspect(page, lambda p: p["rows"] >= 2 and p["canvases"] >= 6)
    assert probe["root_divs"] >= 1 and probe["roots"] >= 1, probe  # the Bokeh document is on the page
    (tmp / "live.png").write_bytes(png)
    assert distinct_colours(png) > 50, "the screenshot is (nearly) blank"
    assert colour_pixels(png, FPS_COLOR) > 30, "no frames/s curve on the page"
    assert colour_pixels(png, RETURN_COLOR) > 30, "no return curve on the page"
    if training.running:  # the page follows the run without a reload
        later, _ = browser.inspect(page, lambda p: p["last_steps"] > probe["last_steps"], timeout=20)
        assert later["rows"] >= probe["rows"]


# ---- an embedded cluster with a dashboard, a run on it ----


@pytest.fixture(scope="module")
def live_run(tmp_path_factory):
    """A 2-worker LocalCluster with its dashboard on a free port, and a ~25 s CartPole run on it."""
    tmp = tmp_path_factory.mktemp("live")
    session = connect_cluster(n_workers=2, dashboard_address="127.0.0.1:0", scheduler_plugins=(DashboardPlugin(),))
    try:
        pids = worker_pids(session.client)
        page = dashboard_page(session.client)
        assert page and page.endswith("/daskrl"), page
        config = run_config(tmp, "live", base=LIGHT_CARTPOLE, train_for_seconds=25.0, eval_interval_env_steps=20_000,
                            eval_episodes=2)
        training = Training(config, session.client)
        base = page[: -len("/daskrl")]
        wait_for_reports(base, "live", training)
        yield {"session": session, "page": page, "base": base, "training": training, "tmp": tmp,
               "exp_dir": tmp / "live"}
        training.wait()
    finally:
        session.close()
    assert_no_segments_of(pids)


@slow("a 25 s training run with its dashboard (live_run)")
def test_api_and_metrics_grow_while_training(live_run):
    check_endpoints_grow(live_run["base"], "live", live_run["training"])
    with pytest.raises(urllib.error.HTTPError) as err:
        get_json(f"{live_run['base']}/daskrl/api/latest?run=no-such-run")
    assert err.value.code == 404


@needs_chromium
@slow("headless Chromium on the live_run dashboard")
def test_live_page_shows_the_run_in_chromium(live_run, browser):
    check_live_page(browser, live_run["page"], "live", live_run["training"], live_run["tmp"])


@slow("waits for live_run's 25 s run to end")
def test_tensorboard_and_csv_hold_every_report(live_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    summary = live_run["training"].wait()
    exp_dir = live_run["exp_dir"]
    with open(exp_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    times = [float(r["time_s"]) for r in rows]
    span, interval = times[-1] - times[0], 1.0
    assert span > 10, times
    # One row per reporting period plus the final one at the stop: never two in a period, and not many periods
    # without a row (a report comes late by a poll of every component, longer on a loaded machine).
    gaps = [b - a for a, b in zip(times[:-2], times[1:-1], strict=True)]
    assert min(gaps) >= 0.9 * interval, gaps
    assert 0.45 * span / interval <= len(rows) - 1 <= span / interval + 2, (len(rows), span, gaps)
    assert int(rows[-1]["env_steps"]) == summary["env_steps"]

    acc = EventAccumulator(str(exp_dir / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"perf/fps", "perf/policy_lag", "episode/return_mean", "learner/loss", "learner/approx_kl",
            "learner/policy_version"} <= tags, tags
    assert {"time/learner/train", "time/rollout_0/env"} <= tags, tags
    fps = acc.Scalars("perf/fps")
    assert [e.step for e in fps] == [int(r["env_steps"]) for r in rows]
    assert [round(e.value, 1) for e in fps] == [round(float(r["fps"]), 1) for r in rows]


@slow("a 25 s training run with its dashboard (live_run)")
def test_the_dashboard_history_holds_the_evaluations(live_run):
    live_run["training"].wait()
    rows = get_json(f"{live_run['base']}/daskrl/api/history?run=live")["rows"]
    evals = [r for r in rows if r.get("eval_return_mean") is not None]
    assert evals and all(r["eval_episodes"] == 2 and r["eval_env_steps"] <= r["env_steps"] for r in evals), evals
    from daskrl.monitor.dashboard import summary_html

    store = MetricsStore()
    for r in rows:
        store.add({"run": "live", "env": "CartPole-v1", "row": r})
    assert f"evaluation return {evals[-1]['eval_return_mean']:.1f}" in summary_html(store.get("live"))


@slow("a 25 s training run with its dashboard (live_run)")
def test_metrics_doc_covers_every_column_tag_and_activity(live_run):
    live_run["training"].wait()
    doc = (REPO / "docs" / "metrics.md").read_text()
    with open(live_run["exp_dir"] / "metrics.csv", newline="") as f:
        columns = next(csv.reader(f))
    missing = [c for c in columns if f"`{c}`" not in doc] + [t for t in TAGS.values() if f"`{t}`" not in doc]
    records = [json.loads(line) for line in open(live_run["exp_dir"] / "time_breakdown.jsonl")]
    activities = {a for r in records for parts in r["shares"].values() for a in parts}
    missing += [a for a in sorted(activities) if f"`{a}`" not in doc]
    assert not missing, f"docs/metrics.md does not explain: {missing}"
    assert "report_screenshot.png" in doc


@needs_chromium
@slow("headless Chromium on live_run's report")
def test_html_report_shows_the_curves(live_run, tmp_path):
    from daskrl.cli import main
    from daskrl.monitor.figures.report import write_report

    live_run["training"].wait()
    exp_dir = live_run["exp_dir"]
    out = write_report(str(exp_dir), str(tmp_path / "report.html"))
    shot = tmp_path / "report.png"
    chromium_cli(tmp_path, "--window-size=1200,1300", "--hide-scrollbars", "--virtual-time-budget=5000",
                 f"--screenshot={shot}", f"file://{out}")
    png = shot.read_bytes()
    assert distinct_colours(png) > 50, "the report screenshot is (nearly) blank"
    assert colour_pixels(png, RETURN_COLOR) > 30 and colour_pixels(png, FPS_COLOR) > 30
    assert colour_pixels(png, EVAL_COLOR) > 30, "no evaluation markers on the learning curve"
    dom = chromium_cli(tmp_path, "--virtual-time-budget=5000", "--dump-dom", f"file://{out}").stdout.decode()
    assert "daskrl report: live" in dom and "data-root-id" in dom
    if os.environ.get("DASKRL_UPDATE_DOCS"):  # refresh the picture in docs/metrics.md
        shutil.copy(shot, REPO / "docs" / "report_screenshot.png")

    # the command: default output next to the metrics; a missing experiment is one error line and exit 2
    assert main(["report", "--experiment", "live", "--train-dir", str(exp_dir.parent)]) == 0
    assert (exp_dir / "report.html").stat().st_size > 100_000  # BokehJS is inlined: no network needed


def test_report_command_on_a_missing_experiment(tmp_path, capsys):
    from daskrl.cli import main

    assert main(["report", "--experiment", "nope", "--train-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nope" in err and "not found" in err, err


# ---- a `dask scheduler` + `dask worker` cluster started from the command line ----


@pytest.fixture(scope="module")
def cli_cluster(tmp_path_factory):
    """``dask scheduler`` with its dashboard on a free port and three ``dask worker`` processes."""
    from distributed import Client

    tmp = tmp_path_factory.mktemp("cli")
    scheduler_file = tmp / "s.json"
    dash_port = free_port()
    procs: list[subprocess.Popen] = []
    logs = []

    def start(*args: str) -> None:
        log = open(tmp / f"proc{len(procs)}.log", "w")
        logs.append(log)
        procs.append(subprocess.Popen([*args], stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                      cwd=tmp))

    dask = os.path.join(os.path.dirname(sys.executable), "dask")  # the `dask` command of this environment
    if not os.path.exists(dask):
        dask = shutil.which("dask") or "dask"
    client = None
    pids: set[int] = set()
    try:
        start(dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", f"127.0.0.1:{dash_port}",
              "--scheduler-file", str(scheduler_file))
        deadline = time.monotonic() + 60
        while not scheduler_file.exists() or not scheduler_file.read_text().strip():
            assert procs[0].poll() is None, (tmp / "proc0.log").read_text()
            assert time.monotonic() < deadline, "the scheduler did not start"
            time.sleep(0.2)
        address = json.loads(scheduler_file.read_text())["address"]
        for _ in range(3):
            start(dask, "worker", address, "--nworkers", "1", "--nthreads", "1")
        client = Client(address, timeout=60)
        client.wait_for_workers(3, timeout=90)
        pids = worker_pids(client)
        yield {"client": client, "address": address, "base": f"http://127.0.0.1:{dash_port}", "tmp": tmp}
    finally:
        if client is not None:
            client.close()
        # the workers, then the scheduler once they ended (each shuts down what it started; why in that order:
        # helpers.Processes.stop)
        for group in (procs[1:], procs[:1]):
            for p in group:
                if p.poll() is None:
                    p.terminate()
            for p in group:
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(10)
        for log in logs:
            log.close()
    left = {p.pid: group_members(p.pid) for p in procs}  # each was started as its own process group
    left = {pgid: members for pgid, members in left.items() if members}
    for pgid in left:
        os.killpg(pgid, signal.SIGKILL)
    assert not left, f"processes left behind by dask scheduler/worker: {left}"
    assert_no_segments_of(pids)


@slow("a dask CLI cluster, a 25 s run and headless Chromium")
def test_page_and_endpoints_on_a_cli_scheduler(cli_cluster, tmp_path):
    client = cli_cluster["client"]
    training = Training(run_config(tmp_path, "cli", base=LIGHT_CARTPOLE, num_workers=2, train_for_seconds=25.0), client)
    try:
        base = cli_cluster["base"]
        wait_for_reports(base, "cli", training)
        page = dashboard_page(client)
        assert page == f"http://127.0.0.1:{base.rsplit(':', 1)[1]}/daskrl", page
        check_endpoints_grow(base, "cli", training)
        if CHROMIUM is not None:
            browser = Browser(tmp_path)
            try:
                check_live_page(browser, page, "cli", training, tmp_path)
            finally:
                browser.close()
    finally:
        training.stop()  # the checks needed it running; its 25 s are a bound, not a length
        summary = training.wait()
    assert summary["env_steps"] > 0
    # the plugin is registered once per scheduler and keeps the run after it ended
    plugins = client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.plugins))
    assert "daskrl-dashboard" in plugins
    assert get_json(f"{cli_cluster['base']}/daskrl/api/latest")["row"]["env_steps"] == summary["env_steps"]
    if CHROMIUM is None:
        pytest.skip("chromium is not installed: the endpoints were checked, the page was not")


# ---- the console ----


ROW = {"time_s": 12.0, "env_steps": 12345, "fps": 1234.4, "episode_return_mean": 20.46, "episode_return_std": 3.21,
       "episodes": 17, "policy_version": 3, "policy_lag": 1.23}


def test_console_view_prints_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    view = ConsoleView(100_000, 0.0, stream=out)
    assert not view.live
    view.update(ROW)
    view.update({**ROW, "episode_return_mean": None, "episode_return_std": None, "policy_lag": float("nan")})
    view.close()
    assert out.getvalue().splitlines() == [
        "[   12.0s] env steps      12,345 | fps     1,234 | return 20.5±3.2 (17 ep) | version 3 | lag 1.2",
        "[   12.0s] env steps      12,345 | fps     1,234 | return n/a (17 ep) | version 3",
    ]
    assert progress_line(ROW) == out.getvalue().splitlines()[0]
    assert "\x1b[" not in out.getvalue()


def test_console_view_budget_and_eta():
    view = ConsoleView(100_000, 60.0, stream=io.StringIO())
    assert view.fraction(ROW) == pytest.approx(0.2)  # 12 of 60 s is further than 12,345 of 100,000 steps
    assert view.eta(ROW) == pytest.approx(48.0)  # the time budget ends first
    assert ConsoleView(0, 0.0, stream=io.StringIO()).fraction(ROW) is None


def cli_train(tmp_path: Path, experiment: str) -> list[str]:
    return [sys.executable, "-m", "daskrl", "train", "--env", "CartPole-v1", "--train-dir", str(tmp_path),
            "--experiment", experiment, "--train-for-env-steps", "20000", "--train-for-seconds", "90",
            "--dashboard-address", "", "--num-workers", "1", "--num-envs-per-worker", "8",
            "--report-interval", "0.5"]


@slow("a daskrl train process on a terminal")
def test_cli_train_live_view_on_a_terminal(tmp_path):
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "160"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(cli_train(tmp_path, "tty"), stdin=slave, stdout=slave, stderr=slave, env=env,
                            start_new_session=True)
    os.close(slave)
    chunks = []
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the terminal's other end closed
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        rc = proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        os.close(master)
    text = b"".join(chunks).decode(errors="replace")
    assert rc == 0, text[-3000:]
    assert "\x1b[" in text, "no control sequences: not the live view"
    assert "━" in text and "fps" in text and "steps" in text and "ETA" in text, text[-3000:]
    assert "/20,000 steps" in text
    assert not re.search(r"\[\s*\d+\.\ds\] env steps", text), "plain progress lines on a terminal"
    assert "daskrl: stopping: reached" in text  # the start/stop lines are still printed


@slow("a daskrl train process")
def test_cli_train_plain_lines_when_piped(tmp_path):
    proc = subprocess.run(cli_train(tmp_path, "piped"), capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    progress = [line for line in lines if re.match(r"^\[\s*\d+\.\ds\] env steps\s+[\d,]+ \| fps\s+[\d,]+ \| return ",
                                                   line)]
    assert len(progress) >= 1, proc.stdout
    assert "\x1b[" not in proc.stdout
    start = next(line for line in lines if line.startswith("daskrl: experiment"))
    assert re.search(r"\| dashboard http://\S+:\d+/daskrl$", start), start  # '' = the dashboard on a free port


# ---- the plugin where there is nothing to add to ----


def test_plugin_does_nothing_without_a_dashboard():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster, Client(cluster) as client:
        client.register_plugin(DashboardPlugin())
        client.log_event("daskrl-metrics", {"run": "r", "env": "E", "row": {"time_s": 1.0, "env_steps": 5}})
        state = client.run_on_scheduler(
            lambda dask_scheduler: (dask_scheduler.plugins["daskrl-dashboard"].installed,
                                    len(dask_scheduler.plugins["daskrl-dashboard"].store.runs)))
        assert state == (False, 1)
        assert dashboard_page(client) is None


def test_metrics_store_keeps_runs_bounded():
    store = MetricsStore(max_runs=2)
    for i in range(5000):
        store.add({"run": "a", "env": "E", "row": {"time_s": float(i), "env_steps": i}}, stamp=float(i))
    hist = store.get("a")
    assert 2000 <= len(hist.rows) <= 4000 and hist.rows[-1]["env_steps"] == 4999 and hist.generation >= 1
    store.add({"run": "a", "row": {"time_s": 0.5, "env_steps": 1}})  # the same name started again
    assert len(store.get("a").rows) == 1
    store.add({"run": "b", "row": {"time_s": 1.0}})
    store.add({"run": "c", "row": {"time_s": 1.0}})
    assert store.names() == ["b", "c"] and store.get().run == "c"
    assert not store.add({"row": {}}) and not store.add("junk")
