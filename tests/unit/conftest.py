"""The unit wing: tests that start no Dask cluster, client or process of their own, so the whole wing runs in under
two minutes (``python -m pytest tests/unit -q``), the gate to run between two edits. A test here that starts one
fails at once and says where it belongs: ``tests/cluster/`` (a Dask cluster or client) or ``tests/drills/``
(processes: the CLI, ``dask`` workers, a browser, SLURM, SSH, kills)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

import distributed
import pytest

#: programs a library starts for itself (a video's ffmpeg, ctypes' library lookup, platform's uname) and daskrl's own
#: watchers (an env that starts processes starts a watcher beside it): they come with what a unit test calls, not
#: with a process the test runs
LIBRARY_HELPERS = ("ffmpeg", "ldconfig", "uname")
OWN_WATCHERS = ("reaper.py", "process_watcher.py")


def _refused(what: str, wing: str) -> Callable[..., None]:
    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError(f"a unit test started {what}: it belongs in tests/{wing}/ (tests/unit/ starts none)")
    return refuse


def _words(args: object) -> list[str]:
    if isinstance(args, (str, bytes, os.PathLike)):
        return os.fsdecode(args).split()
    return [os.fsdecode(a) for a in args]  # type: ignore[attr-defined]


def _allowed(words: list[str]) -> bool:
    names = [os.path.basename(w) for w in words[:2]]
    return bool(names) and (names[0].startswith(LIBRARY_HELPERS) or names[-1] in OWN_WATCHERS)


@pytest.fixture(autouse=True)
def no_cluster_and_no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(distributed.LocalCluster, "__init__", _refused("a Dask LocalCluster", "cluster"))
    monkeypatch.setattr(distributed.Client, "__init__", _refused("a Dask Client", "cluster"))
    popen = subprocess.Popen.__init__

    def library_helpers_only(self: subprocess.Popen, args: object, *rest: object, **kwargs: object) -> None:
        words = _words(args)
        if not _allowed(words):
            _refused(f"a process ({' '.join(words)[:80]})", "drills")()
        popen(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", library_helpers_only)
