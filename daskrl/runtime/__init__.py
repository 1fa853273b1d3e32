"""The only part of daskrl that imports Dask: cluster access, components, topic bus, queues, memory, parameters.

Read it in this order: ``signals`` (what a component declares), ``component`` (its thread and hooks),
``handles`` (creating and calling components from the driver), ``wiring`` (connecting signals to slots, work
queues), ``bus`` and ``worker_plugin`` (how messages travel), ``registry`` (the scheduler's routing table),
``shm`` and ``params`` (data that stays put), ``cluster`` (opening one), ``dask_internals`` (what of Dask is
used beyond its public API).

The names below are imported on first use (PEP 562), not with the package: a torch-free, Dask-free module of it
(``procfs``, ``worker_server``) costs its importer nothing more, and the ``daskrl`` command starts the embedded
cluster's worker server before it imports Dask (daskrl/runtime/worker_server.py).
"""

from __future__ import annotations

from daskrl.lazy_names import lazy_names

_HOMES = {
    "ComponentError": "errors", "ConnectError": "errors", "DaskRLError": "errors", "PayloadError": "errors",
    "SharedMemoryError": "errors",
    "ClusterSession": "runtime.cluster", "connect_cluster": "runtime.cluster", "Component": "runtime.component",
    "ComponentHandle": "runtime.handles", "spawn": "runtime.handles", "spawn_all": "runtime.handles",
    "ParameterPublisher": "runtime.params", "ParameterReader": "runtime.params", "RemoteArray": "runtime.shm",
    "SharedArray": "runtime.shm", "SignalRef": "runtime.signals", "SlotRef": "runtime.signals",
    "signal": "runtime.signals", "slot": "runtime.signals", "add_consumer": "runtime.wiring",
    "connect": "runtime.wiring", "disconnect": "runtime.wiring", "remove_consumer": "runtime.wiring",
}

__all__ = sorted(_HOMES)
__getattr__ = lazy_names("daskrl", _HOMES)
