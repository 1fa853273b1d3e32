"""The pieces of Dask beyond its public API that daskrl uses (daskrl.runtime.dask_internals) on a real cluster,
exercised against the installed Dask: actors' addresses, worker and scheduler handlers, batched streams, run_sync
from another thread, the list of workers and the dashboard's pages and routes, on a LocalCluster of two worker
threads in this process; and Dask's housekeeping timers, slowed on an embedded cluster of worker processes. When a
Dask upgrade changes one of them, this test names it, instead of a run hanging elsewhere."""

from __future__ import annotations

import asyncio
import copy
import threading
import time
import urllib.request

import dask
import pytest
from distributed import Client, LocalCluster, get_worker

from daskrl.runtime import connect_cluster, dask_internals
from daskrl.runtime.access.cluster import QUIET_HOUSEKEEPING

RECEIVED: list = []  # what the probe stream handler got (workers run in this process)


def _on_probe_stream(m, **_):
    RECEIVED.append(m)


class Holder:
    """A plain actor."""

    def where(self) -> str:
        return get_worker().address


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(n_workers=2, processes=False, threads_per_worker=1, dashboard_address="127.0.0.1:0") as c, \
            Client(c) as client:
        yield c, client


def test_actor_address_and_worker_actors(cluster):
    _, client = cluster
    worker = sorted(dask_internals.cluster_workers(client))[1]
    actor = client.submit(Holder, actor=True, workers=[worker]).result()
    assert dask_internals.actor_address(actor) == worker == actor.where().result()
    held = client.run(lambda dask_worker: len(dask_internals.worker_actors(dask_worker)), workers=[worker])
    assert held[worker] == 1


def test_worker_rpc_and_stream_handlers_and_batched_streams(cluster):
    _, client = cluster
    a, b = sorted(dask_internals.cluster_workers(client))

    def install(dask_worker):
        dask_internals.add_worker_handlers(dask_worker, rpc={"probe_echo": lambda x: x * 2},
                                           streams={"probe-stream": _on_probe_stream})

    client.run(install, workers=[b])

    async def send(dask_worker):
        stream = await dask_internals.open_batched_stream(b, dask_worker, "probe")
        for i in range(3):
            stream.send({"op": "probe-stream", "m": i})
        await asyncio.sleep(0.2)
        stream.abort()
        return await dask_worker.rpc(b).probe_echo(x=21)

    assert client.run(send, workers=[a])[a] == 42
    deadline = time.monotonic() + 5
    while RECEIVED != [0, 1, 2] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert RECEIVED == [0, 1, 2], "the stream handler did not get the messages in order"


def test_scheduler_handlers(cluster):
    _, client = cluster
    client.run_on_scheduler(lambda dask_scheduler: dask_internals.add_scheduler_handlers(
        dask_scheduler, {"probe_sched": lambda: "here"}))
    assert client.sync(client.scheduler.probe_sched) == "here"


def test_run_sync_from_another_thread(cluster):
    c, _ = cluster

    async def double(x: int) -> int:
        await asyncio.sleep(0)
        return 2 * x

    out: list = []
    thread = threading.Thread(target=lambda: out.append(dask_internals.run_sync(c.loop, double, 4)))
    thread.start()
    thread.join(10)
    assert out == [8]


def test_cluster_workers_are_never_the_clients_worker_less_refresh(cluster):
    """The client's periodic refresh of its scheduler info (here every 5 ms) asks for no workers and writes the
    attribute ``scheduler_info()`` returns; ``cluster_workers`` asks the scheduler itself, so no call comes back
    empty (``scheduler_info()["workers"]`` came back empty in 347 of 9,230 calls this way)."""
    c, _ = cluster
    with dask.config.set({"distributed.client.scheduler-info-interval": "5ms"}), Client(c) as client:
        counts = [len(dask_internals.cluster_workers(client)) for _ in range(2_000)]
    assert set(counts) == {2}


def test_dashboard_page_routes_and_template(cluster):
    c, client = cluster

    def install(dask_scheduler):
        app = dask_internals.dashboard_bokeh_app(dask_scheduler)
        assert app is not None, "no Bokeh application on the scheduler's HTTP server"
        prefix = app.prefix.rstrip("/") + "/"

        def document(scheduler, template_variables, doc):
            from bokeh.models import Div

            doc.add_root(Div(text="probe page"))
            if template_variables is not None:
                dask_internals.apply_dask_template(doc, template_variables)

        with_bar = dask_internals.add_dashboard_page(dask_scheduler, "/probe-page", document, prefix)
        from tornado import web

        class Hello(web.RequestHandler):
            def get(self) -> None:
                self.write("hello")

        dask_internals.add_http_routes(dask_scheduler, [(f"{prefix}probe-api", Hello, {})])
        return with_bar

    assert client.run_on_scheduler(install) is True, "Dask's navigation bar (template variables) is gone"
    base = f"http://127.0.0.1:{c.scheduler.http_server.port}"
    assert urllib.request.urlopen(f"{base}/probe-api", timeout=10).read() == b"hello"
    page = urllib.request.urlopen(f"{base}/probe-page", timeout=10).read().decode()
    assert "bokeh" in page.lower() and "probe-page" in page


@pytest.fixture
def own_dask_config():
    """The test's changes to Dask's configuration undone after it."""
    saved = copy.deepcopy(dask.config.config)
    yield
    dask.config.config.clear()
    dask.config.config.update(saved)


def _housekeeping(dask_worker) -> tuple:
    callbacks = dask_worker.periodic_callbacks
    return (dask_worker._tick_interval, "profile" in callbacks, callbacks["monitor"].callback_time,
            dask_worker.memory_manager.memory_monitor_interval)


def test_an_embedded_cluster_wakes_less_often_for_dasks_housekeeping_and_keeps_a_users_setting(own_dask_config):
    """Worker processes (forked, with the nanny's configuration) and the scheduler run Dask's timers at
    cluster.QUIET_HOUSEKEEPING's intervals; a value the user set stays theirs."""
    for key, (dask_default, _) in QUIET_HOUSEKEEPING.items():
        dask.config.set({key: dask_default})
    dask.config.set({"distributed.admin.tick.interval": "50ms"})  # the user's own
    with connect_cluster(n_workers=1, dashboard_address=None) as s:
        workers = s.client.run(_housekeeping)
        scheduler = s.cluster.scheduler
        scheduler_monitor_ms = scheduler.periodic_callbacks["monitor"].callback_time
        scheduler_tick = scheduler._tick_interval
    assert list(workers.values()) == [(0.05, False, 2000.0, 1.0)]
    assert (scheduler_monitor_ms, scheduler_tick) == (2000.0, 0.05)
