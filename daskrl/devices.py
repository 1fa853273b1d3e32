"""Which torch device a component computes on: ``--learner-device`` and ``--inference-device``.

``auto`` means CUDA where the worker that hosts the component has it, else the CPU; ``cuda`` and ``cuda:N`` insist.
A device is resolved on the component's own worker (a cluster's machines differ), and the runner checks the asked
devices against what the chosen workers report before it creates anything, so a missing GPU is one line naming the
worker and what it has, found in seconds.
"""

from __future__ import annotations

import re
from typing import Any

from daskrl.errors import ConfigError


def inventory() -> dict[str, Any]:
    """What this process can compute on: ``{"cuda": [device names]}`` (empty without a usable CUDA device)."""
    import torch

    if not torch.cuda.is_available():
        return {"cuda": []}
    return {"cuda": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}


def describe(found: dict[str, Any]) -> str:
    gpus = found.get("cuda", [])
    if not gpus:
        return "no CUDA device (the CPU only)"
    return f"{len(gpus)} CUDA device(s): " + ", ".join(f"cuda:{i} {name}" for i, name in enumerate(gpus))


def problem(requested: str, found: dict[str, Any], where: str, option: str) -> str:
    """Why ``requested`` cannot run on a worker that has ``found`` ('' when it can)."""
    match = re.fullmatch(r"cuda(?::(\d+))?", requested)
    if match is None:
        return ""
    index = int(match.group(1) or 0)
    if index < len(found.get("cuda", [])):
        return ""
    return f"{option} {requested}: {where} has {describe(found)}; use {option} auto or cpu, or run it on a worker " \
           "with a GPU (dask worker --resources GPU=1 on that machine)"


def resolve(requested: str, where: str, option: str) -> Any:
    """The ``torch.device`` for ``requested`` in this process; a :class:`ConfigError` when it has no such device."""
    import torch

    found = inventory()
    if requested == "auto":
        return torch.device("cuda" if found["cuda"] else "cpu")
    why = problem(requested, found, where, option)
    if why:
        raise ConfigError([why])
    return torch.device(requested)


def check_cluster(client: Any, asked: list[tuple[str, str, str]], names: dict[str, str]) -> None:
    """Before anything is created: every ``(worker address, option, device)`` asked for is there. ``names`` maps
    addresses to worker names (for the message)."""
    asked = [(address, option, device) for address, option, device in asked if device.startswith("cuda")]
    if not asked:
        return
    found = client.run(inventory, workers=sorted({address for address, _, _ in asked}))
    problems = [p for address, option, device in asked
                if (p := problem(device, found.get(address, {"cuda": []}),
                                 f"worker {names.get(address, address)} ({address})", option))]
    if problems:
        raise ConfigError(problems)


def cpu_has_native_bfloat16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """True on x86 CPUs that compute in bfloat16 natively (AVX512-BF16 or AMX), from the kernel's CPU flags.

    torch has no public check, and its oneDNN check also says yes where bfloat16 is only emulated (slower than
    float32). Elsewhere (no /proc/cpuinfo, other architectures) this says False: float32 is the safe side.
    """
    try:
        with open(cpuinfo) as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return bool({"avx512_bf16", "amx_bf16"} & set(flags))
