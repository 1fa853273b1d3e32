"""The checkpoint store (daskrl.learning.CheckpointStore) on a temporary directory: it keeps the newest checkpoints and
the best one through pruning, a crash in the middle of a write (or the temp files a hard crash leaves) keeps the
previous checkpoint loadable, it unpickles objects only from its own directory, and a resume of several policies
takes the newest moment every policy has a checkpoint of."""

import io
import pickle
import shutil
from fractions import Fraction

import pytest
import torch

from daskrl.learning import CheckpointStore


def _state(step: int) -> dict:
    return {"model": {"w": torch.full((4,), float(step))}, "env_steps": step, "meta": [1, 2.5, "x"]}


def _checkpoint_names(directory) -> list[str]:
    return sorted(p.name for p in directory.glob("checkpoint_*.pt"))


def test_keep_newest_and_best_survives_pruning(tmp_path):
    store = CheckpointStore(tmp_path, keep=2)
    assert store.latest() is None and store.best() is None
    for step in (100, 200, 300, 400, 500):
        best = step == 200
        path = store.save(_state(step), env_steps=step, tag_best=best, score=1.5 if best else None)
        assert path.name == f"checkpoint_{step:012d}.pt"
    assert _checkpoint_names(tmp_path) == [
        "checkpoint_000000000200.pt",
        "checkpoint_000000000400.pt",
        "checkpoint_000000000500.pt",
    ]
    assert store.latest().name == "checkpoint_000000000500.pt"
    assert store.load("latest")["env_steps"] == 500
    assert store.best() == tmp_path / "best.pt"
    assert store.load("best")["env_steps"] == 200
    assert store.best_info() == {"checkpoint": "checkpoint_000000000200.pt", "env_steps": 200, "score": 1.5}

    # A new best releases the old one to normal pruning.
    store.save(_state(600), env_steps=600, tag_best=True, score=2.0)
    assert _checkpoint_names(tmp_path) == ["checkpoint_000000000500.pt", "checkpoint_000000000600.pt"]
    assert store.load("best")["env_steps"] == 600
    torch.testing.assert_close(store.load(store.latest())["model"]["w"], torch.full((4,), 600.0))


def test_crash_mid_write_keeps_previous_checkpoint(tmp_path, monkeypatch):
    store = CheckpointStore(tmp_path, keep=3)
    store.save(_state(100), env_steps=100, tag_best=True)
    real_save = torch.save

    def crashing_save(obj, f, *args, **kwargs):
        buf = io.BytesIO()
        real_save(obj, buf)
        data = buf.getvalue()
        f.write(data[: len(data) // 2])
        f.flush()
        raise RuntimeError("simulated crash")

    monkeypatch.setattr(torch, "save", crashing_save)
    with pytest.raises(RuntimeError, match="simulated crash"):
        store.save(_state(200), env_steps=200, tag_best=True)
    monkeypatch.setattr(torch, "save", real_save)

    assert _checkpoint_names(tmp_path) == ["checkpoint_000000000100.pt"]
    leftovers = sorted(p.name for p in tmp_path.iterdir())
    assert leftovers == ["best.json", "best.pt", "checkpoint_000000000100.pt"]
    assert store.latest().name == "checkpoint_000000000100.pt"
    assert store.load("latest")["env_steps"] == 100
    assert store.load("best")["env_steps"] == 100


def test_leftover_temp_files_from_hard_crash_are_ignored(tmp_path):
    store = CheckpointStore(tmp_path, keep=3)
    store.save(_state(100), env_steps=100)
    # What a SIGKILL between write and rename leaves behind: truncated temp files.
    good = (tmp_path / "checkpoint_000000000100.pt").read_bytes()
    (tmp_path / ".tmp_checkpoint_000000000900.pt.abc123.tmp").write_bytes(good[:20])
    (tmp_path / ".tmp_best.pt.xyz.tmp").write_bytes(b"garbage")
    assert store.latest().name == "checkpoint_000000000100.pt"
    assert store.best() is None
    assert store.load("latest")["env_steps"] == 100
    with pytest.raises(FileNotFoundError):
        store.load("best")
    # A new store on the same directory (restart) sees the same thing.
    assert CheckpointStore(tmp_path).load("latest")["env_steps"] == 100


def test_crash_while_updating_best_keeps_old_best(tmp_path, monkeypatch):
    store = CheckpointStore(tmp_path, keep=3)
    store.save(_state(100), env_steps=100, tag_best=True)

    def crashing_copy(src, dst, *args, **kwargs):
        dst.write(src.read(10))
        raise OSError("disk full")

    monkeypatch.setattr(shutil, "copyfileobj", crashing_copy)
    with pytest.raises(OSError, match="disk full"):
        store.save(_state(200), env_steps=200, tag_best=True)
    monkeypatch.undo()
    assert store.load("best")["env_steps"] == 100
    assert store.best_info()["env_steps"] == 100
    assert store.load("latest")["env_steps"] == 200


def test_load_non_tensor_objects_only_from_own_directory(tmp_path):
    store = CheckpointStore(tmp_path / "ckpt")
    state = {"fraction": Fraction(1, 3)}  # rejected by weights_only=True
    store.save(state, env_steps=1)
    assert store.load("latest") == state

    foreign = tmp_path / "foreign.pt"
    torch.save(state, foreign)
    with pytest.raises(pickle.UnpicklingError):
        store.load(foreign)


def test_invalid_arguments(tmp_path):
    with pytest.raises(ValueError):
        CheckpointStore(tmp_path, keep=0)
    store = CheckpointStore(tmp_path)
    with pytest.raises(ValueError):
        store.save({}, env_steps=-1)
    with pytest.raises(FileNotFoundError):
        store.load("latest")


def test_a_resume_loads_every_policys_checkpoint_of_the_newest_moment_they_all_have(tmp_path, capsys):
    """A run killed between writing policy 0's checkpoint and policy 1's: the resume takes the moment before, for
    both, removes the partial write the kill left, and says what it loaded."""
    from daskrl.config import Config
    from daskrl.driver.launch.start import resumed_line
    from daskrl.driver.loop.policy_book import PolicyBook
    from daskrl.learning.checkpoints import checkpoint_dirs

    config = Config.from_flat({"train_dir": str(tmp_path), "experiment": "two", "num_policies": 2, "resume": True})
    stores = [CheckpointStore(d) for d in checkpoint_dirs(config.experiment_dir, 2)]
    for step in (100, 200):
        for store in stores:
            store.save(_state(step), env_steps=step)
    stores[0].save(_state(300), env_steps=300)  # killed before policy 1's checkpoint of that moment
    (stores[1].directory / ".tmp_checkpoint_000000000300.pt.abc.tmp").write_bytes(b"half a checkpoint")
    book = PolicyBook(config, resuming=True)
    states = book.resume_states()
    assert [s["env_steps"] for s in states] == [200, 200]
    assert book.resumed_from == {"checkpoint": "checkpoints/policy_0/checkpoint_000000000200.pt", "env_steps": 200,
                                 "partial_writes_removed": 1}
    assert not list(stores[1].directory.glob(".tmp_*"))
    assert resumed_line(book.resumed_from, 2) == (
        "daskrl: resuming from checkpoints/policy_0/checkpoint_000000000200.pt (each of the 2 policies' of that "
        "moment): 200 env steps; removed 1 partial write(s) a killed run left")
