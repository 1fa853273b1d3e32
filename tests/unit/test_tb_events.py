"""daskrl's own TensorBoard event files (daskrl/monitor/outputs/tb_events.py): the bytes of every record are those
tensorboard's protobuf messages give, and tensorboard's reader reads the files back."""

from __future__ import annotations

import io

import pytest

from daskrl.monitor.outputs.tb_events import (
    FILE_VERSION,
    EventWriter,
    crc32c,
    event,
    hparams_value,
    record,
    scalar_value,
    text_value,
)

pb = pytest.importorskip("tensorboard.compat.proto.event_pb2", reason="tensorboard reads the files back")
from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata  # noqa: E402
from tensorboard.compat.proto.tensor_pb2 import TensorProto  # noqa: E402
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto  # noqa: E402
from tensorboard.plugins.text.plugin_data_pb2 import TextPluginData  # noqa: E402

pb = pytest.importorskip("tensorboard.compat.proto.event_pb2", reason="tensorboard reads the files back")


def test_crc32c_is_the_castagnoli_checksum():
    assert crc32c(b"123456789") == 0xE3069283  # the polynomial's standard check value
    assert crc32c(b"") == 0


@pytest.mark.parametrize("step", [0, 1, 300, 2**40, -5])
@pytest.mark.parametrize("value", [0.0, -1.5, 3.25e9, float("nan")])
def test_a_scalar_event_is_byte_for_byte_the_protobuf_message(step, value):
    expected = pb.Event(wall_time=1764187200.125, step=step,
                        summary=Summary(value=[Summary.Value(tag="episode/return", simple_value=value)]))
    assert event(1764187200.125, step, summary_value=scalar_value("episode/return", value)) == \
        expected.SerializeToString()


def test_a_text_event_and_the_version_event_are_the_protobuf_messages():
    metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(
        plugin_name="text", content=TextPluginData(version=0).SerializeToString()))
    tensor = TensorProto(dtype="DT_STRING", string_val=["config: ünïcode".encode()],
                         tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]))
    expected = pb.Event(wall_time=2.5, step=7, summary=Summary(value=[
        Summary.Value(tag="config/text_summary", metadata=metadata, tensor=tensor)]))
    assert event(2.5, 7, summary_value=text_value("config", "config: ünïcode")) == expected.SerializeToString()
    assert event(2.5, 0, file_version=FILE_VERSION) == pb.Event(wall_time=2.5, file_version=FILE_VERSION
                                                                ).SerializeToString()


def test_records_are_framed_as_tensorboards_record_writer_frames_them():
    from tensorboard.summary.writer.record_writer import RecordWriter

    for data in (b"", b"x", bytes(range(256)) * 3):
        out = io.BytesIO()
        RecordWriter(out).write(data)
        assert record(data) == out.getvalue()


def test_tensorboard_reads_the_files_back(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    writer = EventWriter(str(tmp_path), flush_secs=0)
    for step in range(5):
        writer.add_scalar("loss/policy", 0.5 * step, step * 100)
    writer.add_text("config", "lr: 3e-4", 0)
    writer.close()
    writer.close()  # a second close is harmless
    other = EventWriter(str(tmp_path))  # a second file in the same second gets its own name
    other.close()
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 2
    events = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    scalars = events.Scalars("loss/policy")
    assert [(s.step, s.value) for s in scalars] == [(k * 100, 0.5 * k) for k in range(5)]
    [text] = events.Tensors("config/text_summary")
    assert text.tensor_proto.string_val == [b"lr: 3e-4"]


@pytest.mark.parametrize("hparams", [{"learning_rate": 3e-4, "env": "CartPole-v1", "sync": True, "seed": 3},
                                     {"normalize_obs": False, "hidden_sizes": "[64, 64]", "batch_size": 2048}])
def test_the_hparams_record_is_the_plugins_own_message(hparams):
    from tensorboard.plugins.hparams import summary_v2
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    expected = summary_v2.hparams_pb(hparams, trial_id="group-1", start_time_secs=1234.5).value[0]
    ours = Summary.Value.FromString(hparams_value(hparams, "group-1", 1234.5))
    # the plugin's content is bytes of a message with a map, whose entries protobuf may write in any order: compared
    # as messages; everything around it as bytes
    assert HParamsPluginData.FromString(ours.metadata.plugin_data.content) == \
        HParamsPluginData.FromString(expected.metadata.plugin_data.content)
    for value in (ours, expected):
        value.metadata.plugin_data.content = b""
    assert ours.SerializeToString() == expected.SerializeToString()


def test_tensorboards_hparams_plugin_reads_a_runs_record_and_a_configurations_seeds_share_a_group(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata

    from daskrl.config import Config
    from daskrl.monitor.outputs.tensorboard_log import TensorBoardLog, run_hparams

    config = Config().replace(env="CartPole-v1", learning_rate=3e-4, hidden_sizes=[64, 64], seed=3,
                              experiment="x", report_interval=0.5)
    log = TensorBoardLog(str(tmp_path), config=config)
    log.write({"env_steps": 100, "episode_return_mean": 20.0})
    log.close()
    events = EventAccumulator(str(tmp_path), size_guidance={"tensors": 0})
    events.Reload()
    content = events.SummaryMetadata(metadata.SESSION_START_INFO_TAG).plugin_data.content
    start = metadata.parse_session_start_info_plugin_data(content)
    shown = {name: value.WhichOneof("kind") and getattr(value, value.WhichOneof("kind"))
             for name, value in start.hparams.items()}
    assert shown == {"env": "CartPole-v1", "algo": "appo", "seed": 3.0, "train_for_env_steps": 1_000_000.0,
                     "learning_rate": 3e-4, "hidden_sizes": "[64, 64]"}  # no run plumbing (experiment, reports)
    assert start.group_name == run_hparams(config)[1] == run_hparams(config.replace(seed=4))[1]
    assert run_hparams(config.replace(learning_rate=1e-3))[1] != start.group_name
