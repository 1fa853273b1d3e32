"""daskrl: high-throughput asynchronous distributed reinforcement learning (APPO) on Dask."""

__version__ = "0.1.0"

from daskrl.config import Config, ConfigError  # noqa: E402
from daskrl.envs import EnvError, make_env, register_env  # noqa: E402


def train(config: Config, client=None, **kwargs):
    """Train as configured (see :func:`daskrl.runner.train`); imported lazily so ``import daskrl`` stays light."""
    from daskrl.runner import train as _train

    return _train(config, client=client, **kwargs)


__all__ = ["Config", "ConfigError", "EnvError", "make_env", "register_env", "train", "__version__"]
