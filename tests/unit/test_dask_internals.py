"""The pieces of Dask beyond its public API that daskrl uses (daskrl.runtime.dask_internals) and that need no cluster,
exercised against the installed Dask: a frame's call stack, the forkserver preload Dask must leave as daskrl set it,
and the interval a nanny polls its starting worker at. When a Dask upgrade changes one of them, this test names it,
instead of a run hanging elsewhere."""

from __future__ import annotations

import sys

import dask

from daskrl.runtime import dask_internals


def test_call_stack_formats_a_frame():
    stack = dask_internals.call_stack(sys._getframe())
    assert stack and any("test_call_stack_formats_a_frame" in line for line in stack)


def test_dask_keeps_the_forkserver_preload_daskrl_set():
    """A nanny's first request for the forkserver context would import Dask's optional packages here and replace the
    preload list with its own; once told, Dask hands out the same context and leaves the list alone."""
    import multiprocessing
    from multiprocessing import forkserver

    import distributed.utils

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["daskrl.runtime.workers.preload_done"])
    dask_internals.keep_forkserver_preload()
    with dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"}):
        assert distributed.utils.get_mp_context() is context
    assert forkserver._forkserver._preload_modules == ["daskrl.runtime.workers.preload_done"]


def test_nannies_poll_for_their_workers_start_at_the_interval_daskrl_sets():
    """The attribute daskrl shortens exists on Dask's WorkerProcess and is what its wait for a started worker sleeps."""
    import inspect

    from distributed.nanny import WorkerProcess

    assert isinstance(WorkerProcess._init_msg_interval, float)
    assert "self._init_msg_interval" in inspect.getsource(WorkerProcess._wait_until_connected)
    before = WorkerProcess._init_msg_interval
    try:
        dask_internals.poll_worker_starts_often()
        assert WorkerProcess._init_msg_interval == dask_internals.NANNY_START_POLL_S
    finally:
        WorkerProcess._init_msg_interval = before


def test_a_nanny_answers_while_its_port_listens():
    """What decides whether a lost learner waits for its worker to come back under its name: a live nanny (here a
    listening socket) answers; a closed port, no nanny, or an in-process worker's address does not."""
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
        assert dask_internals.nanny_answers(address)
    assert not dask_internals.nanny_answers(address)  # closed: refused at once
    assert not dask_internals.nanny_answers(None) and not dask_internals.nanny_answers("inproc://127.0.0.1/1/2")


def test_a_placement_knows_each_workers_name_and_nanny():
    from daskrl.config import Config
    from daskrl.driver.fleet.placement import place

    workers = {"tcp://h:1": {"name": "a", "nanny": "tcp://h:11"}, "tcp://h:2": {"name": "b"},
               "tcp://h:3": {"name": "c", "nanny": "tcp://h:13"}}
    placement = place(workers, Config.from_flat({"num_workers": 1}))
    assert placement.names == {"tcp://h:1": "a", "tcp://h:2": "b", "tcp://h:3": "c"}
    assert placement.nannies == {"tcp://h:1": "tcp://h:11", "tcp://h:3": "tcp://h:13"}  # a worker without: none
