"""A TensorBoard event-file writer of scalars and texts, in the standard library and struct packing alone.

Why not a library's writer: ``torch.utils.tensorboard`` and tensorboardX import torch, and ``tensorboard``'s own
EventFileWriter imports protobuf and tensorboard's generated messages; the driver, which writes a run's event files,
needs neither for anything else (torch: 116 MB of private memory and 0.7 s; tensorboard's writer: 12 MB and 0.1 s,
in every run; docs/metrics.md, "The TensorBoard writer", has the measurement against tensorboardX). The records
written here are small and fixed: an ``Event`` holding a ``Summary`` of one value, either a simple value
(``add_scalar``), for the text plugin a one-string tensor under ``<tag>/text_summary`` (``add_text``), or for the
HParams plugin a run's hyperparameters as its session start (``add_session_start``), encoded field by field as protobuf's
wire format lays them out, and framed as TFRecords (length and data, each with a masked CRC-32C).
tests/unit/test_tb_events.py checks them against tensorboard's own messages, and tests/drills/test_tb_events.py
reads the files with tensorboard's reader.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from itertools import count

#: the file's first event names the format version, as every TensorBoard writer's does
FILE_VERSION = "brain.Event:2"
_DT_STRING = 7  # tensorflow's DataType enum value for strings
_files = count()  # one process may open several files in the same second: a counter keeps their names apart


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum TFRecords use (zlib's crc32 is another polynomial)."""
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked_crc(data: bytes) -> bytes:
    crc = crc32c(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def record(data: bytes) -> bytes:
    """One TFRecord: length, its masked CRC, the data, its masked CRC."""
    length = struct.pack("<Q", len(data))
    return length + _masked_crc(length) + data + _masked_crc(data)


# ---- protobuf wire format: the few field kinds these messages use ----


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64s as protobuf writes them: ten bytes of two's complement
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(field: int, wire_type: int) -> bytes:
    return _varint(field << 3 | wire_type)


def _bytes_field(field: int, data: bytes) -> bytes:
    return _key(field, 2) + _varint(len(data)) + data


def _int_field(field: int, value: int) -> bytes:
    return _key(field, 0) + _varint(value) if value else b""  # proto3 leaves zeros out


def event(wall_time: float, step: int, *, summary_value: bytes = b"", file_version: str = "") -> bytes:
    """An ``Event``: wall_time (1, double), step (2), then file_version (3) or a summary (5) of one value."""
    out = _key(1, 1) + struct.pack("<d", wall_time) + _int_field(2, step)
    if file_version:
        out += _bytes_field(3, file_version.encode())
    if summary_value:
        out += _bytes_field(5, _bytes_field(1, summary_value))  # Summary.value (1), repeated: one here
    return out


def scalar_value(tag: str, value: float) -> bytes:
    """A ``Summary.Value``: tag (1), simple_value (2, float)."""
    return _bytes_field(1, tag.encode()) + _key(2, 5) + struct.pack("<f", value)


def text_value(tag: str, text: str) -> bytes:
    """A ``Summary.Value`` the text plugin shows: tag (1), a one-string tensor (8: dtype, shape [1], the string)
    and metadata (9) naming the plugin (its TextPluginData, version 0, serializes to nothing)."""
    shape = _bytes_field(2, _int_field(1, 1))  # TensorShapeProto.dim (2): one Dim of size (1) 1
    tensor = _int_field(1, _DT_STRING) + _bytes_field(2, shape) + _bytes_field(8, text.encode("utf_8"))
    metadata = _bytes_field(1, _bytes_field(1, b"text"))  # SummaryMetadata.plugin_data (1): plugin_name (1)
    return _bytes_field(1, f"{tag}/text_summary".encode()) + _bytes_field(8, tensor) + _bytes_field(9, metadata)


def _double_field(field: int, value: float) -> bytes:
    return _key(field, 1) + struct.pack("<d", value)


def _hparam_value(value: bool | int | float | str) -> bytes:
    """A ``google.protobuf.Value``: number_value (2, double), string_value (3) or bool_value (4)."""
    if isinstance(value, bool):
        return _int_field(4, int(value)) or _key(4, 0) + b"\x00"  # false is written, as protobuf's writer does
    if isinstance(value, (int, float)):
        return _double_field(2, float(value))
    return _bytes_field(3, value.encode())


def hparams_value(hparams: dict[str, bool | int | float | str], group: str, start_time: float) -> bytes:
    """A ``Summary.Value`` the HParams plugin reads as a run's session start: tag ``_hparams_/session_start_info``,
    its null tensor (8: float, shape [0]) and metadata (9) whose plugin content is an ``HParamsPluginData`` (version
    0) holding a ``SessionStartInfo``: the hyperparameters (1, a map sorted by name), the group (4) that gathers a
    trial's seeds, and the start time (5)."""
    entries = b"".join(_bytes_field(1, _bytes_field(1, name.encode()) + _bytes_field(2, _hparam_value(hparams[name])))
                       for name in sorted(hparams))
    start = entries + _bytes_field(4, group.encode()) + _double_field(5, start_time)
    content = _bytes_field(3, start)  # HParamsPluginData.session_start_info (3); version 0 is left out
    metadata = _bytes_field(1, _bytes_field(1, b"hparams") + _bytes_field(2, content))
    null_tensor = _int_field(1, 1) + _bytes_field(2, _bytes_field(2, b""))  # DT_FLOAT, one dim of size 0
    return _bytes_field(1, b"_hparams_/session_start_info") + _bytes_field(8, null_tensor) + _bytes_field(9, metadata)


class EventWriter:
    """``add_scalar``, ``add_text``, ``flush`` and ``close`` of an event file in ``log_dir`` (named as TensorBoard's
    writers name theirs, so TensorBoard finds it)."""

    def __init__(self, log_dir: str, flush_secs: float = 120) -> None:
        os.makedirs(log_dir, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(_files)}"
        self.path = os.path.join(log_dir, name)
        self.file = open(self.path, "ab")  # noqa: SIM115  (kept open for the run, closed by close())
        self.flush_secs = flush_secs
        self._flushed = time.monotonic()
        self.file.write(record(event(time.time(), 0, file_version=FILE_VERSION)))
        self.flush()

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self._add(scalar_value(tag, float(value)), step)

    def add_text(self, tag: str, text: str, step: int) -> None:
        self._add(text_value(tag, text), step)

    def add_session_start(self, hparams: dict[str, bool | int | float | str], group: str) -> None:
        """The run's hyperparameters for TensorBoard's HParams view, which lists runs by them beside the last value of
        each scalar (so no metrics are given here, unlike tensorboardX's ``add_hparams``); ``group``: runs that
        share it (a configuration's seeds) are one row there."""
        self._add(hparams_value(hparams, group, time.time()), 0)

    def flush(self) -> None:
        if not self.file.closed:
            self.file.flush()
        self._flushed = time.monotonic()

    def close(self) -> None:
        if not self.file.closed:
            self.file.flush()
            self.file.close()

    def _add(self, value: bytes, step: int) -> None:
        self.file.write(record(event(time.time(), int(step), summary_value=value)))
        if time.monotonic() - self._flushed > self.flush_secs:
            self.flush()
