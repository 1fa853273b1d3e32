"""What a recorded run's bytes depend on besides its config: package versions, the CPU's instruction sets, the
torch build, daskrl's commit. ``daskrl replay`` refuses a schedule recorded where any of these differ, naming it:
a kernel that vectorizes differently rounds differently, and the weights then part after a few steps.

Read without importing torch (the runner never does): versions from the installed packages' metadata, the CPU's
flags from ``/proc/cpuinfo``.
"""

from __future__ import annotations

import platform
from importlib import metadata
from pathlib import Path
from typing import Any

#: the packages whose code computes a step (an env's own package is named by the run's --env-packages)
PACKAGES = ("daskrl", "torch", "numpy", "gymnasium")
#: instruction sets that change which kernels numpy and torch pick
CPU_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "asimd",
             "sve")


def machine_manifest() -> dict[str, Any]:
    """This machine's manifest (see the module docstring)."""
    return {"packages": {name: _version(name) for name in PACKAGES}, "python": platform.python_version(),
            "machine": platform.machine(), "cpu_flags": _cpu_flags(), "daskrl_commit": _commit()}


def manifest_differences(recorded: dict[str, Any], here: dict[str, Any]) -> list[str]:
    """What differs between a recorded manifest and this machine's, one phrase each."""
    out = [f"{name} {recorded['packages'].get(name)} was recorded, {version} is installed"
           for name, version in here["packages"].items() if recorded["packages"].get(name) != version]
    for key, what in (("python", "Python"), ("machine", "the CPU architecture"), ("daskrl_commit", "daskrl's commit")):
        if recorded.get(key) != here[key]:
            out.append(f"{what} was {recorded.get(key)}, is {here[key]}")
    missing, extra = sorted(set(recorded["cpu_flags"]) - set(here["cpu_flags"])), \
        sorted(set(here["cpu_flags"]) - set(recorded["cpu_flags"]))
    if missing or extra:
        out.append("the CPU's instruction sets differ (" + ", ".join(
            [f"recorded with {flag}" for flag in missing] + [f"{flag} here" for flag in extra]) + ")")
    return out


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _cpu_flags() -> list[str]:
    try:
        with open("/proc/cpuinfo") as f:
            line = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        return []
    have = set(line.partition(":")[2].split())
    return [flag for flag in CPU_FLAGS if flag in have]


def _commit() -> str | None:
    """The git commit of daskrl's source tree (an editable install), read from its ``.git`` without running git;
    None for an installed wheel."""
    git = _git_dir(Path(__file__).resolve())
    if git is None:
        return None
    head = (git / "HEAD").read_text().strip()
    if not head.startswith("ref: "):
        return head  # a detached HEAD holds the commit itself
    ref = head[5:]
    common = git / (git / "commondir").read_text().strip() if (git / "commondir").is_file() else git  # a worktree's
    for where in (git, common):
        if (where / ref).is_file():
            return (where / ref).read_text().strip()
    packed = common / "packed-refs"
    lines = packed.read_text().splitlines() if packed.is_file() else []
    return next((line.split()[0] for line in lines if line.endswith(" " + ref)), None)


def _git_dir(source: Path) -> Path | None:
    """The git directory of the checkout holding ``source`` (a worktree's ``.git`` file names its own)."""
    for parent in source.parents:
        dot_git = parent / ".git"
        if dot_git.is_dir():
            return dot_git
        if dot_git.is_file():
            return (parent / dot_git.read_text().partition("gitdir:")[2].strip()).resolve()
    return None
