"""The HTTP face of a policy server (tornado, which Dask already depends on), on an event loop of its own thread.

    POST /act     {"observations": ..., "client_id": "...", "deterministic": true, "reset": false}
                  -> 200 {"actions": [...], "policy_version": N}
    GET  /health  -> {"status": "ok", "policy_version": N}
    GET  /        -> the env, observation and action spaces, the version, the batching settings (also /info)
    GET  /stats   -> the batching counters (forward passes, passes shared by several requests, ...)

``observations`` is one observation or a batch (a list of them); ``actions`` has one action per observation (a
list of one for a single observation). A bad request gets 400 and ``{"error": "one line"}``; the server goes on
serving. With a token (:mod:`.http_guard`) every path but ``/health`` wants ``Authorization: Bearer <token>``
(401 without it), and a body over the bound gets 413; both are decided before any of the body is parsed or kept.
docs/serving.md has the whole protocol.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from typing import Any

from tornado import httpserver, netutil, web

from daskrl.errors import ConfigError, RequestError, one_line
from daskrl.serving.http_guard import HttpGuard
from daskrl.serving.service import PolicyService

logger = logging.getLogger(__name__)

#: the fields of a POST /act body
FIELDS = ("observations", "client_id", "deterministic", "reset")
#: how much past the bound a refused body is still read (and dropped) so that its client hears why; past it, tornado
#: cuts the connection
READ_PAST_REFUSAL_BYTES = 64 * 2**20


def parse_body(body: bytes) -> dict[str, Any]:
    """The fields of a POST /act body; raises :class:`RequestError` for anything else."""
    try:
        value = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RequestError(f'the body is not JSON ({exc}): send {{"observations": [...]}}') from None
    except RecursionError:
        raise RequestError("the body nests arrays or objects too deeply to read: an observation nests as deep as "
                           "its shape") from None
    if not isinstance(value, dict):
        raise RequestError(f'the body must be a JSON object such as {{"observations": [...]}}, not '
                           f"{type(value).__name__}")
    if unknown := sorted(set(value) - set(FIELDS)):
        raise RequestError(f"unknown field(s) {', '.join(map(repr, unknown))}: a request has "
                           f"{', '.join(FIELDS)}")
    if "observations" not in value:
        raise RequestError('the body has no "observations" (one observation, or a list of them)')
    return value


@web.stream_request_body
class _JsonHandler(web.RequestHandler):
    """Every answer is JSON, errors included; without the token nothing but ``/health`` is answered.

    Bodies stream in: no handler waits for a whole body in memory, and only POST /act keeps one. A refusal decided
    before the body is in (no token, too large, no such path) is answered once the body has been read and dropped:
    tornado closes a connection whose answer comes before its body, and a client that sends its whole body before
    it reads (Python's http.client, most libraries) would then see a broken connection instead of the reason."""

    open_to_all = False

    def initialize(self, service: PolicyService, guard: HttpGuard) -> None:
        self.service, self.guard = service, guard
        self._refusal: tuple[int, str] | None = None

    def prepare(self) -> None:
        if not self.open_to_all and not self.guard.allows(self.request.headers.get("Authorization")):
            self.set_header("WWW-Authenticate", 'Bearer realm="daskrl serve"')
            self.refuse(401, "this server wants its token: send the header 'Authorization: Bearer <token>'")

    def refuse(self, status: int, message: str) -> None:
        """Answer ``status`` when the body is in (see the class docstring); the first refusal is the one told."""
        if self._refusal is None:
            self._refusal = (status, message)

    def refused(self) -> bool:
        """Whether the request was refused (and now answered)."""
        if self._refusal is not None and not self._finished:
            self.fail(*self._refusal)
        return self._refusal is not None

    def data_received(self, chunk: bytes) -> None:
        """A body sent where none is read is dropped as it arrives."""

    def fail(self, status: int, message: str) -> None:
        self.set_status(status)
        self.finish({"error": message})

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        self.finish({"error": self._reason})


class _Act(_JsonHandler):
    """POST /act. The body is counted against the bound as it arrives rather than after the whole of it sits in
    memory; past the bound it is dropped, not kept."""

    def prepare(self) -> None:
        super().prepare()
        self._chunks: list[bytes] = []
        self._size = 0
        # tornado cuts off a body past this (a bare 400); up to it, the rest of a refused body is read and dropped
        self.request.connection.set_max_body_size(self.guard.max_body_bytes + READ_PAST_REFUSAL_BYTES)
        declared = self.request.headers.get("Content-Length", "0")
        if declared.isdigit() and int(declared) > self.guard.max_body_bytes:
            self._too_large(int(declared))
            if int(declared) > self.guard.max_body_bytes + READ_PAST_REFUSAL_BYTES:
                self.refused()  # not read at all: answered now, and tornado closes the connection

    def data_received(self, chunk: bytes) -> None:
        if self._refusal is not None:
            return
        self._size += len(chunk)
        if self._size > self.guard.max_body_bytes:
            self._chunks.clear()
            self._too_large(self._size)
        else:
            self._chunks.append(chunk)

    def _too_large(self, size: int) -> None:
        self.refuse(413, f"a body of {size:,} bytes or more: this server reads at most {self.guard.max_body_bytes:,} "
                         "(--max-body-mb); send fewer observations a request")

    async def post(self) -> None:
        if self.refused():
            return
        try:
            future = self.service.request(**parse_body(b"".join(self._chunks)))
        except RequestError as exc:
            return self.fail(400, str(exc))
        except (TypeError, ValueError, OverflowError, RecursionError) as exc:  # what no check above foresaw
            return self.fail(400, f"a request this server cannot read ({one_line(exc, 160)}): docs/serving.md "
                                  "has what POST /act takes")
        try:
            reply = await asyncio.wrap_future(future)
        except RequestError as exc:  # what only the pass can tell (a client's rows changed without reset)
            return self.fail(400, str(exc))
        except asyncio.CancelledError:  # the server closes while this request waits for its pass
            return self.fail(503, "the policy server is closing")
        except Exception as exc:  # the pass failed: the client hears why
            return self.fail(500, one_line(exc))
        self.finish({"actions": reply["actions"].tolist(), "policy_version": reply["policy_version"]})


class _Health(_JsonHandler):
    open_to_all = True  # what a load balancer's probe asks: no secret in it

    def get(self) -> None:
        self.finish({"status": "ok", "policy_version": self.service.policy.version})


class _Info(_JsonHandler):
    def get(self) -> None:
        if not self.refused():
            self.finish(self.service.info())


class _Stats(_JsonHandler):
    def get(self) -> None:
        if not self.refused():
            self.finish(self.service.stats())


class _NotFound(_JsonHandler):
    open_to_all = True

    def prepare(self) -> None:
        self.refuse(404, f"no such path {self.request.path!r}: POST /act, GET /health, GET / or GET /stats")

    def answer(self, *args: str) -> None:
        self.refused()

    get = post = put = delete = patch = answer


def make_app(service: PolicyService, guard: HttpGuard) -> web.Application:
    args = {"service": service, "guard": guard}
    return web.Application([(r"/act", _Act, args), (r"/health", _Health, args), (r"/(?:info)?", _Info, args),
                            (r"/stats", _Stats, args)],
                           default_handler_class=_NotFound, default_handler_args=args,
                           log_function=_log_failures)


def _log_failures(handler: web.RequestHandler) -> None:
    """Only the server's own failures go to the log: a client's bad request is its own answer, not the server's
    news, and neither is a request turned away while the server closes (503)."""
    if handler.get_status() == 500:
        logger.warning("%s %s -> %d", handler.request.method, handler.request.uri, handler.get_status())


class HttpFrontend:
    """Serves :func:`make_app` on ``host:port`` (0: a free port) from a thread with its own event loop, so neither
    a Dask worker's event loop nor the caller's thread carries the HTTP traffic; ``guard``: token, body bound, TLS."""

    def __init__(self, service: PolicyService, host: str, port: int, guard: HttpGuard | None = None) -> None:
        self._guard = guard or HttpGuard()
        try:  # bound here, so a port in use is refused to the caller at once
            self._sockets = netutil.bind_sockets(port, host)
        except OSError as exc:
            raise ConfigError([f"cannot serve HTTP on {host}:{port} ({exc.strerror or exc}): choose another "
                               "--port (0 picks a free one) or --host"]) from None
        self.port = self._sockets[0].getsockname()[1]
        shown = socket.gethostname() if host in ("", "0.0.0.0", "::") else host
        self.url = f"{self._guard.scheme}://{shown}:{self.port}"
        self._app = make_app(service, self._guard)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="daskrl-serve-http", daemon=True)

    def start(self) -> str:
        """Start answering; returns the server's URL."""
        self._thread.start()
        self._ready.wait(30)
        return self.url

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(self._open())
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._close(server)

    def _close(self, server: httpserver.HTTPServer) -> None:
        """No new connections; requests still waiting for their pass are cancelled (the batcher skips their
        answers), then the connections close."""
        server.stop()
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        try:
            self._loop.run_until_complete(asyncio.wait_for(server.close_all_connections(), 5))
        except asyncio.TimeoutError:
            logger.warning("daskrl serve: HTTP connections still open after 5 s; closing anyway")
        self._loop.close()

    async def _open(self) -> httpserver.HTTPServer:
        # no body is read whole: every handler streams (see _JsonHandler), and POST /act sets its own bound
        server = httpserver.HTTPServer(self._app, ssl_options=self._guard.ssl_context(),
                                       max_body_size=self._guard.max_body_bytes + READ_PAST_REFUSAL_BYTES)
        server.add_sockets(self._sockets)
        return server

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        else:
            for sock in self._sockets:
                sock.close()
