"""The only part of daskrl that imports Dask: cluster access, components, topic bus, queues, memory, parameters.

Read it in this order: ``signals`` (what a component declares), ``component`` (its thread and hooks),
``handles`` (creating and calling components from the driver), ``wiring`` (connecting signals to slots, work
queues), ``bus`` and ``worker_plugin`` (how messages travel), ``registry`` (the scheduler's routing table),
``shm`` and ``params`` (data that stays put), ``cluster`` (opening one), ``dask_internals`` (what of Dask is
used beyond its public API).
"""

from daskrl.errors import ComponentError, ConnectError, DaskRLError, PayloadError, SharedMemoryError
from daskrl.runtime.cluster import ClusterSession, connect_cluster
from daskrl.runtime.component import Component
from daskrl.runtime.handles import ComponentHandle, spawn, spawn_all
from daskrl.runtime.params import ParameterPublisher, ParameterReader
from daskrl.runtime.shm import RemoteArray, SharedArray
from daskrl.runtime.signals import SignalRef, SlotRef, signal, slot
from daskrl.runtime.wiring import add_consumer, connect, disconnect, remove_consumer

__all__ = [
    "ClusterSession", "Component", "ComponentError", "ComponentHandle", "ConnectError", "DaskRLError",
    "ParameterPublisher", "ParameterReader", "PayloadError", "RemoteArray", "SharedArray", "SharedMemoryError",
    "SignalRef", "SlotRef", "add_consumer", "connect", "connect_cluster", "disconnect", "remove_consumer",
    "signal", "slot", "spawn", "spawn_all",
]
