"""The only part of daskrl that imports Dask: cluster access, components, topic bus, queues, memory, parameters.

Its wings, in reading order: ``actors/`` (what a component declares in ``signals``, its thread and hooks in
``component``, the driver's ``handles`` on it), ``messaging/`` (``wiring`` signals to slots and work queues, the
``bus`` that carries them, the scheduler's ``registry``), ``workers/`` (what daskrl installs on every Dask worker),
``memory/`` (``shm`` arrays and ``params`` blocks: data that stays put), ``access/`` (opening a cluster, embedded or
someone else's, and the runs that share it), ``deploy/`` (clusters started for a run: SLURM, SSH, Kubernetes),
``cleanup/`` (nothing left behind when a process dies); beside them ``dask_internals`` (what of Dask is used
beyond its public API) and ``logs`` (where log lines go).

The names below are imported on first use (PEP 562), not with the package: a torch-free, Dask-free module of it
(``procfs``, ``worker_server``) costs its importer nothing more, and the ``daskrl`` command starts the embedded
cluster's worker server before it imports Dask (daskrl/runtime/workers/worker_server.py).
"""

from __future__ import annotations

from daskrl.lazy_names import lazy_names

_HOMES = {
    "ComponentError": "errors", "ConnectError": "errors", "DaskRLError": "errors", "PayloadError": "errors",
    "SharedMemoryError": "errors",
    "ClusterSession": "runtime.access.cluster", "connect_cluster": "runtime.access.cluster",
    "Component": "runtime.actors.component", "ComponentHandle": "runtime.actors.handles",
    "spawn": "runtime.actors.handles", "spawn_all": "runtime.actors.handles",
    "SignalRef": "runtime.actors.signals", "SlotRef": "runtime.actors.signals", "signal": "runtime.actors.signals",
    "slot": "runtime.actors.signals",
    "ParameterPublisher": "runtime.memory.params", "ParameterReader": "runtime.memory.params",
    "RemoteArray": "runtime.memory.shm", "SharedArray": "runtime.memory.shm",
    "add_consumer": "runtime.messaging.wiring", "connect": "runtime.messaging.wiring",
    "disconnect": "runtime.messaging.wiring", "remove_consumer": "runtime.messaging.wiring",
}

__all__ = sorted(_HOMES)
__getattr__ = lazy_names("daskrl", _HOMES)
