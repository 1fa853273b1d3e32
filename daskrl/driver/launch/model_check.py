"""The run's network, built once on one of its workers before any component is created.

Why on a worker: a model option that cannot work (an unsuitable encoder, a registered core that answers in other
shapes) should be one :class:`~daskrl.errors.ConfigError` before anything is created, not a failure in every
component; building the network needs torch, which the driver otherwise never imports (116 MB of private memory
and 0.7 s of CPU while the cluster starts). The workers have torch already (the forkserver preloaded it), and the
user's registered encoders and cores travel with the call, as they do to the components.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from daskrl.config import Config
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.models.registry import Shipped, pack_components
from daskrl.runtime import dask_internals


def _build(config: Config, spaces: EnvSpaces, components: Shipped) -> None:
    from daskrl.models.actor_critic import check_model
    from daskrl.models.registry import install_components

    install_components(components)
    check_model(config, spaces)


def check_model_on_cluster(client: Any, config: Config, spaces: EnvSpaces, workers: Sequence[str] = (),
                           timeout: float = 120.0) -> None:
    """Build the run's network on one of ``workers`` (the learner's: any worker when empty) of ``client``'s cluster;
    raises the ConfigError that building raised. A cluster without workers yet is left to placement, which says
    what it waits for."""
    if not dask_internals.cluster_workers(client):
        return
    client.submit(_build, config, spaces, pack_components(), pure=False, workers=list(workers) or None,
                  allow_other_workers=False).result(timeout=timeout)
