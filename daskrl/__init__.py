"""daskrl: high-throughput asynchronous distributed reinforcement learning (APPO) on Dask."""

__version__ = "0.1.0"
