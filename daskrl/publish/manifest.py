"""A bundle's ``manifest.json``: what is needed to run the result again and to check it was copied whole.

It names the package versions the policy is played with (the network's numbers depend on torch; the env's
dynamics on gymnasium and its env package), the commit of the daskrl source that published it, the machine, the
evaluation's settings and returns, the commands that play and retrain it, and each file's size and digest.
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from importlib import metadata
from typing import Any

#: distributions whose versions a result depends on
PACKAGES = ("daskrl", "torch", "gymnasium", "numpy", "dask", "distributed", "onnx", "onnxruntime", "huggingface_hub")
#: the bundle format's version: a reader refuses a newer one
FORMAT_VERSION = 1


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """The installed version of each distribution (None: not installed)."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def source_commit(directory: str | None = None) -> dict[str, Any]:
    """The git commit of the daskrl source (and whether it had uncommitted changes); None where it is not a
    git checkout (an installed wheel) or git is missing."""
    directory = directory or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        commit = _git(directory, "rev-parse", "HEAD")
        dirty = bool(_git(directory, "status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": dirty}


def _git(directory: str, *args: str) -> str:
    done = subprocess.run(["git", "-C", directory, *args], capture_output=True, text=True, timeout=10, check=True)
    return done.stdout.strip()


def machine() -> dict[str, Any]:
    """Where it was published: enough to tell a result from another machine's."""
    return {"platform": platform.platform(), "machine": platform.machine(), "processor": platform.processor(),
            "cpu_count": os.cpu_count(), "python": sys.version.split()[0]}


def build_manifest(source: dict[str, Any], evaluation: dict[str, Any], rerun: list[str],
                   files: dict[str, Any]) -> dict[str, Any]:
    """The manifest's content (``source``: the experiments or sweep it came from; ``evaluation``: settings and
    returns; ``rerun``: commands; ``files``: :func:`daskrl.publish.bundle.file_digests`)."""
    return {"format": "daskrl-bundle", "format_version": FORMAT_VERSION,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "source": source, "evaluation": evaluation, "rerun": rerun, "versions": package_versions(),
            "git": source_commit(), "machine": machine(), "files": files}
