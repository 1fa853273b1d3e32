"""daskrl: high-throughput asynchronous distributed reinforcement learning (APPO, DQN, SAC) on Dask.

The names below are imported on first use (PEP 562), so ``import daskrl`` costs nothing: the ``daskrl`` command
starts the embedded cluster's worker server before it imports anything heavy (daskrl/__main__.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from daskrl.lazy_names import lazy_names

if TYPE_CHECKING:
    from daskrl.config import Config

__version__ = "0.1.0"

_HOMES = {"Config": "config", "ConfigError": "config", "Observer": "driver.loop.observers", "EnvError": "envs",
          "make_env": "envs", "register_env": "envs", "Algorithm": "driver.fleet.algorithms",
          "register_algorithm": "driver.fleet.algorithms"}


__getattr__ = lazy_names(__name__, _HOMES, submodules=True)


def train(config: Config, client=None, observers=(), on_report=None):
    """Train as configured and wait for the end (see :func:`daskrl.api.train`); imported lazily so ``import daskrl``
    stays light."""
    from daskrl.api import train as _train

    return _train(config, client=client, observers=observers, on_report=on_report)


def start(config: Config, client=None, observers=(), on_report=None):
    """Start a run and return a handle on it as soon as it trains (see :func:`daskrl.api.start`)."""
    from daskrl.api import start as _start

    return _start(config, client=client, observers=observers, on_report=on_report)


def attach(name: str, client, control: bool = False):
    """A handle on a run started elsewhere on the same cluster (see :func:`daskrl.api.attach`)."""
    from daskrl.api import attach as _attach

    return _attach(name, client, control=control)


def serve(experiment=None, client=None, **options):
    """Serve a trained policy (a checkpoint, or a live run's newest weights with ``follow=``): a handle with
    ``act(obs, client_id=None)`` and ``close()`` (see :func:`daskrl.serving.serve`)."""
    from daskrl.serving import serve as _serve

    return _serve(experiment, client, **options)


def export(experiment_dir: str, format: str = "onnx", policy: int = 0, which: str = "latest",
           output: str | None = None) -> dict:
    """Write a trained policy to an ONNX or TorchScript file for use without daskrl and return its description (see
    :func:`daskrl.evaluation.export.export_policy` and docs/export.md)."""
    from daskrl.evaluation.export import export_policy

    return export_policy(experiment_dir, format, policy=policy, which=which, output=output)


__all__ = ["Config", "ConfigError", "EnvError", "Observer", "attach", "export", "make_env", "register_env", "serve",
           "start", "train", "__version__"]
