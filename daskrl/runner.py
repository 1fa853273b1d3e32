"""``from daskrl.runner import train``: the path earlier releases and their users' scripts import ``train`` from.
The runner itself lives in :mod:`daskrl.driver.runner`; ``daskrl.train`` is the path to use."""

from daskrl.api import train

__all__ = ["train"]
