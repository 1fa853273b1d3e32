"""The parts of Dask that daskrl uses beyond its public API, each behind one small function.

Dask keeps these stable in practice but promises nothing about them, so they live here and nowhere else, and
``tests/cluster/test_dask_internals.py`` exercises every one against the installed Dask: after an upgrade that changes
one, that test fails with the name of the function, instead of a run hanging somewhere far away.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Coroutine
from typing import Any

from distributed.batched import BatchedSend
from distributed.comm import connect
from distributed.diagnostics.plugin import SchedulerPlugin  # noqa: F401  (the base of daskrl's scheduler plugins)
from distributed.utils import sync


def actor_address(actor: Any) -> str:
    """The address of the worker that holds an actor (``Actor._address``)."""
    return actor._address


def worker_actors(worker: Any) -> list[Any]:
    """The actor instances a worker holds now (``worker.state.actors``)."""
    return [actor for actor in worker.state.actors.values() if actor is not None]


def add_worker_handlers(worker: Any, rpc: dict[str, Callable], streams: dict[str, Callable]) -> None:
    """Serve ``rpc`` handlers (``worker.handlers``) and batched-stream handlers (``worker.stream_handlers``)."""
    worker.handlers.update(rpc)
    worker.stream_handlers.update(streams)


def add_scheduler_handlers(scheduler: Any, rpc: dict[str, Callable]) -> None:
    """Serve RPC handlers on the scheduler (``scheduler.handlers``), as the scheduler's own extensions do."""
    scheduler.handlers.update(rpc)


def raise_adaptive_target(scheduler: Any, floor: Callable[[], int]) -> None:
    """Make the scheduler's adaptive target (what ``cluster.adapt`` scales to, from the task load) at least
    ``floor()``: daskrl's components are long-lived actors, which that load does not count."""
    original = scheduler.handlers["adaptive_target"]

    def adaptive_target(*args: Any, **kwargs: Any) -> int:
        return max(original(*args, **kwargs), floor())

    scheduler.handlers["adaptive_target"] = adaptive_target


async def open_batched_stream(address: str, worker: Any, name: str) -> BatchedSend:
    """A batched stream from ``worker`` to the worker at ``address``: messages ``{"op": NAME, ...}`` sent on it
    reach ``stream_handlers[NAME]`` there, in order (the connection's first message opens the peer's stream)."""
    comm = await connect(address, **worker.connection_args)
    comm.name = name
    await comm.write({"op": "connection_stream"})
    stream = BatchedSend(interval="1ms", loop=worker.loop)
    stream.start(comm)
    return stream


def cluster_workers(client: Any) -> dict[str, dict]:
    """The scheduler's workers now (address -> info with "name", "resources", "memory_limit", ...), asked of the
    scheduler on each call (its ``identity`` handler).

    Why not ``client.scheduler_info()["workers"]``: that refreshes a cache shared by the whole client and returns it,
    and the client's own periodic refresh (every 2 s) writes a copy without workers into the same attribute; a call
    from one thread that the refresh overtakes returns no workers at all (a sweep's trial was refused by "the cluster
    has 0 worker processes" on a cluster of 4)."""
    return client.sync(client.scheduler.identity, n_workers=-1)["workers"]


def nanny_answers(address: str | None, timeout: float = 1.0) -> bool:
    """Whether the nanny at ``address`` (``tcp://host:port``) still accepts connections: a worker process that died
    under a live nanny comes back under its name in seconds, one whose nanny went with it (a batch job cancelled, a
    machine lost) never does. A plain TCP connect, closed at once; anything but ``tcp://`` (or no nanny): False."""
    import socket
    from urllib.parse import urlsplit

    if not address or not address.startswith("tcp://"):
        return False
    parts = urlsplit(address)
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=timeout):
            return True
    except OSError:
        return False


def _retirement_time(dask_worker: Any) -> float | None:
    """When this worker closes itself (``dask worker --lifetime``), as a Unix time; None: it does not. Dask keeps only
    the lifetime in seconds (stagger included) and counts it from the worker's construction, which comes after its
    process started: counting from the process's start gives a time a second or two early, never late."""
    lifetime = getattr(dask_worker, "lifetime", None)
    if not lifetime:
        return None
    import psutil

    return psutil.Process().create_time() + float(lifetime)


def worker_retirements(client: Any, addresses: list[str]) -> dict[str, float | None]:
    """Each worker's planned retirement (see :func:`_retirement_time`); workers that did not answer are left out."""
    if not addresses:
        return {}
    try:
        answers = client.run(_retirement_time, workers=addresses, on_error="return")
    except Exception:  # a worker left while asked: the next poll asks those still there
        return {}
    return {a: t for a, t in answers.items() if t is None or isinstance(t, float)}


def run_sync(loop: Any, fn: Callable[..., Coroutine], *args: Any, **kwargs: Any) -> Any:
    """Run coroutine function ``fn`` on the event loop ``loop`` from another thread, and wait for its result."""
    return sync(loop, fn, *args, **kwargs)


def call_stack(frame: types.FrameType) -> list[str]:
    """A thread's stack, formatted the way Dask's profiler prints it."""
    from distributed.profile import call_stack as format_stack

    return format_stack(frame)


def keep_forkserver_preload() -> None:
    """Keep the forkserver preload daskrl set (:mod:`daskrl.runtime.workers.worker_server`): the first time a nanny
    asks for the forkserver context, Dask imports its required and optional packages in this process (pandas and lz4
    where installed) and sets a preload of its own for a server started afterwards."""
    import distributed.utils

    distributed.utils._forkserver_preload_set = True


#: how often a nanny looks for its new worker's "started" message (Dask polls a multiprocessing queue every 50 ms,
#: which a run's start waited out for half of that on average): a worker starts in about 0.1 s, so 5 ms polls cost
#: about 20 wake-ups of the driver per worker start
NANNY_START_POLL_S = 0.005


def poll_worker_starts_often() -> None:
    """Nannies of this process notice a started worker within :data:`NANNY_START_POLL_S` (``WorkerProcess.
    _init_msg_interval``)."""
    import distributed.nanny

    distributed.nanny.WorkerProcess._init_msg_interval = NANNY_START_POLL_S


# ---- the scheduler's dashboard ----


def dashboard_bokeh_app(scheduler: Any) -> Any | None:
    """Dask's own Bokeh application on the scheduler's HTTP server, or None when the dashboard is off."""
    app = getattr(scheduler, "http_application", None)
    if app is None:
        return None
    try:
        from bokeh.server.tornado import BokehTornado
    except ImportError:
        return None
    return next((a for a in getattr(app, "applications", []) if isinstance(a, BokehTornado)), None)


def add_dashboard_page(scheduler: Any, route: str, make_document: Callable, prefix: str) -> bool:
    """Serve a Bokeh page at ``<prefix><route>`` on the scheduler's dashboard, with Dask's navigation bar when it
    can be had (``make_document(scheduler, template_variables, doc)`` builds one session's document; its second
    argument is None without the bar). The page is added to Dask's navigation bar too."""
    from distributed.dashboard.core import BokehApplication
    from tornado.ioloop import IOLoop

    variables: dict[str, Any] = {}
    try:
        from distributed.dashboard.scheduler import template_variables

        variables = template_variables(scheduler)
        page = route.strip("/")
        if page not in variables["pages"]:
            variables["pages"].append(page)
    except Exception:  # an older or newer Dask without the bar: the page still works
        variables = {}

    def document(_scheduler: Any, extra: dict, doc: Any) -> None:  # Bokeh's per-session call, through Dask
        make_document(scheduler, extra if variables else None, doc)

    app = BokehApplication({route: document}, scheduler, prefix=prefix, template_variables=variables)
    scheduler.http_application.add_application(app)
    app.initialize(IOLoop.current())
    app.start()
    return bool(variables)


def apply_dask_template(doc: Any, template_variables: dict) -> None:
    """Give a Bokeh document Dask's page template and theme (the navigation bar of every dashboard page)."""
    from distributed.dashboard.components.scheduler import BOKEH_THEME, env

    doc.template = env.get_template("simple.html")
    doc.template_variables.update(template_variables)
    doc.theme = BOKEH_THEME


def add_http_routes(scheduler: Any, routes: list[tuple]) -> None:
    """Add tornado routes ``(pattern, handler, kwargs)`` to the scheduler's HTTP server."""
    scheduler.http_application.add_handlers(r".*", routes)
