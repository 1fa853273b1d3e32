"""daskrl: high-throughput asynchronous distributed reinforcement learning (APPO) on Dask."""

__version__ = "0.1.0"

from daskrl.config import Config, ConfigError  # noqa: E402
from daskrl.driver.observers import Observer  # noqa: E402
from daskrl.envs import EnvError, make_env, register_env  # noqa: E402


def train(config: Config, client=None, observers=(), on_report=None):
    """Train as configured (see :func:`daskrl.api.train`); imported lazily so ``import daskrl`` stays light."""
    from daskrl.api import train as _train

    return _train(config, client=client, observers=observers, on_report=on_report)


__all__ = ["Config", "ConfigError", "EnvError", "Observer", "make_env", "register_env", "train", "__version__"]
