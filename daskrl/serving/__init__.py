"""Serving a trained policy: ``daskrl serve`` and ``daskrl.serve(experiment, client)``.

Observations in, actions out, over HTTP (:mod:`.http_app`) or through the Dask client (:mod:`.component`), with
concurrent requests gathered into one forward pass (:mod:`.batching`), a recurrent state per client (:mod:`.states`)
and a live run's newest weights on request (:mod:`.live`); :mod:`.handle` starts a server where it is asked to run.
docs/serving.md has the protocol. Importing this package imports no torch (the command line's flags come from
:mod:`.command`); :func:`serve` does.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ServeHandle", "serve"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from daskrl.serving import handle

        return getattr(handle, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
