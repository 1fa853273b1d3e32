"""The only part of daskrl that knows Dask: cluster access, components, topic bus, queues, memory, parameters."""

from daskrl.errors import ComponentError, ConnectError, DaskRLError, PayloadError, SharedMemoryError
from daskrl.runtime.cluster import ClusterSession, connect_cluster
from daskrl.runtime.component import (
    Component,
    ComponentHandle,
    SignalRef,
    SlotRef,
    connect,
    disconnect,
    signal,
    slot,
    spawn,
    spawn_all,
)
from daskrl.runtime.params import ParameterPublisher, ParameterReader
from daskrl.runtime.shm import RemoteArray, SharedArray
from daskrl.runtime.work_queue import add_consumer, remove_consumer

__all__ = [
    "ClusterSession", "Component", "ComponentError", "ComponentHandle", "ConnectError", "DaskRLError",
    "ParameterPublisher", "ParameterReader", "PayloadError", "RemoteArray", "SharedArray", "SharedMemoryError",
    "SignalRef", "SlotRef", "add_consumer", "connect", "connect_cluster", "disconnect", "remove_consumer",
    "signal", "slot", "spawn", "spawn_all",
]
