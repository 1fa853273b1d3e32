"""daskrl serve: answer observations with a trained policy's actions over HTTP (POST /act) until Ctrl-C or SIGTERM.

    daskrl serve --experiment cartpole --port 8000                # the latest checkpoint, from this process
    daskrl serve --experiment cartpole --which best --deterministic
    daskrl serve --follow cartpole --scheduler tcp://host:8786    # a live run's newest weights, from a worker
    daskrl serve --experiment cartpole --host 0.0.0.0 --token-file secret --tls-cert cert.pem --tls-key key.pem
"""

from __future__ import annotations

import argparse
import signal
import threading
from typing import TYPE_CHECKING, Any

from daskrl.serving.http_guard import DEFAULT_MAX_BODY_MB, TOKEN_VARIABLE

if TYPE_CHECKING:
    from daskrl.serving.handle import ServeHandle


def add_serve_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="answer observations with a trained policy's actions over HTTP (POST /act)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiment", default=None, help="experiment name (with --follow: the run's, by default)")
    p.add_argument("--train-dir", default="train_dir", help="directory that holds experiment directories")
    p.add_argument("--which", "--checkpoint", dest="which", default="latest",
                   help="'latest', 'best' or a checkpoint file")
    p.add_argument("--policy", type=int, default=0, help="with --num-policies: which policy to serve")
    p.add_argument("--host", default=None,
                   help="address to listen on (default 127.0.0.1; with --scheduler, the serving worker's host)")
    p.add_argument("--port", type=int, default=8000, help="HTTP port (0: a free one, printed at start)")
    p.add_argument("--deterministic", action="store_true",
                   help="answer with the most likely action when a request does not say")
    p.add_argument("--max-batch", type=int, default=256, help="most observations in one forward pass")
    p.add_argument("--max-wait-ms", type=float, default=2.0,
                   help="how long the first request of a pass waits for others to share it")
    p.add_argument("--max-clients", type=int, default=10_000,
                   help="recurrent policies: clients whose states are kept (the least recently seen are dropped)")
    p.add_argument("--max-batch-rows", type=int, default=4096,
                   help="most observations one request may carry (more: refused with 400)")
    p.add_argument("--max-body-mb", type=float, default=DEFAULT_MAX_BODY_MB,
                   help="largest request body read, in MB (larger: refused with 413 before it is read)")
    p.add_argument("--token", default=None,
                   help="require 'Authorization: Bearer TOKEN' on every path but /health (visible in ps: prefer "
                        f"--token-file or ${TOKEN_VARIABLE})")
    p.add_argument("--token-file", default=None, help="the token, read from this file")
    p.add_argument("--tls-cert", default=None, help="serve HTTPS with this certificate (PEM; with --tls-key)")
    p.add_argument("--tls-key", default=None, help="the certificate's private key (PEM)")
    p.add_argument("--follow", metavar="RUN", default=None,
                   help="serve the newest weights the live run RUN publishes (needs --scheduler)")
    p.add_argument("--scheduler", default=None,
                   help="address of the Dask scheduler: serve from one of its workers (default: this process)")
    p.add_argument("--worker", default=None, help="with --scheduler: the worker address to serve from")


def run_serve(args: argparse.Namespace) -> int:
    """Serve until SIGINT or SIGTERM; bad options and a missing experiment end with one line (exit 2)."""
    from daskrl.serving.handle import serve  # torch: imported once the flags are known to be good

    handle = serve(args.experiment, args.scheduler, train_dir=args.train_dir, which=args.which, policy=args.policy,
                   follow=args.follow, port=args.port, host=args.host, deterministic=args.deterministic,
                   max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, max_clients=args.max_clients,
                   max_batch_rows=args.max_batch_rows, max_body_mb=args.max_body_mb, token=args.token,
                   token_file=args.token_file, tls_cert=args.tls_cert, tls_key=args.tls_key, worker=args.worker)
    try:
        _say_started(handle)
        _wait_for_a_stop_signal()
        stats = handle.stats()
    finally:
        handle.close()
    print(f"daskrl serve: stopped after {stats['requests']:,} requests in {stats['forward_passes']:,} forward passes",
          flush=True)
    return 0


def _say_started(handle: ServeHandle) -> None:
    info = handle.info()
    source = f"run {info['follow']!r}" if info.get("follow") else f"{info['checkpoint']} checkpoint"
    print(f"daskrl serve: {info['experiment']} ({info['env']}, {source}, policy version {info['policy_version']}) "
          f"at {handle.url}: POST /act, GET / describes it; Ctrl-C stops", flush=True)


def _wait_for_a_stop_signal() -> None:
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stop.wait(0.5):
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
