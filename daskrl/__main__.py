"""The ``daskrl`` command's entry point (also ``python -m daskrl``): for a run on the embedded cluster, the worker
server starts first.

Why: the server's imports (torch: about 0.8 s) decide when the cluster's workers can start, and this process's own
imports (daskrl and its dependencies: about 0.4 s) and the checks of the options would otherwise come before them.
The guess from the arguments is cheap and may be wrong (a ``--config`` file naming a scheduler): the command stops
a server it does not use (:func:`daskrl.runtime.workers.worker_server.stop`), and does so on every way out.
"""

from __future__ import annotations

import sys


def runs_embedded_cluster(argv: list[str]) -> bool:
    """``daskrl train|sample ...`` without ``--scheduler``, ``--deploy`` or ``--serial``, and not asking for help (a
    ``--deploy local`` guessed wrong is stopped again, as a --config file's scheduler is)."""
    if not argv or argv[0] not in ("train", "sample"):
        return False
    flags = {arg.split("=", 1)[0] for arg in argv[1:]}
    return not flags & {"--scheduler", "--deploy", "--serial", "-h", "--help"}


def main() -> int:
    argv = sys.argv[1:]
    from daskrl.runtime.workers import worker_server

    if runs_embedded_cluster(argv):
        worker_server.start()
    try:
        from daskrl.cli import main as command

        return command(argv)
    finally:
        worker_server.stop()


if __name__ == "__main__":
    sys.exit(main())
