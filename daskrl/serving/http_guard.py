"""How a policy server's HTTP face meets a network: a token every request must carry, a bound on a request body's
bytes, and TLS. Decided before any of a request's body is parsed or kept, so a stranger's or an oversized request
costs the server no parse and no memory (docs/serving.md, "Facing a network").

The certificate and key travel as their contents, read where the options were given: a server on a Dask worker of
another host needs no copy of the files there.
"""

from __future__ import annotations

import hmac
import os
import ssl
import tempfile
from dataclasses import dataclass

from daskrl.errors import ConfigError

#: the largest request body answered by default: a batch of 64 Atari frame stacks as JSON numbers is about 8 MB
DEFAULT_MAX_BODY_MB = 16.0
#: the environment variable a token may come from (a token on the command line is visible to every user's ``ps``)
TOKEN_VARIABLE = "DASKRL_SERVE_TOKEN"


@dataclass(frozen=True)
class HttpGuard:
    """What the HTTP face checks; the defaults (no token, no TLS) serve a trusted network, as before."""

    max_body_bytes: int = int(DEFAULT_MAX_BODY_MB * 2**20)
    token: str | None = None
    tls_cert_pem: bytes | None = None
    tls_key_pem: bytes | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert_pem is not None else "http"

    def allows(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header carries the token (``Bearer <token>``); any header passes without one.
        Compared in constant time, so the answer's timing says nothing of how much of a guess was right."""
        if self.token is None:
            return True
        scheme, _, given = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self.token.encode())

    def ssl_context(self) -> ssl.SSLContext | None:
        """The server's TLS context (None: plain HTTP). ``load_cert_chain`` reads files only, so the contents go to a
        private folder for the moment of loading."""
        if self.tls_cert_pem is None or self.tls_key_pem is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        with tempfile.TemporaryDirectory(prefix="daskrl_tls_") as folder:
            cert, key = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
            for path, pem in ((cert, self.tls_cert_pem), (key, self.tls_key_pem)):
                with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                    f.write(pem)
            try:
                context.load_cert_chain(cert, key)
            except ssl.SSLError as exc:
                raise ConfigError([f"--tls-cert/--tls-key: not a certificate and its private key in PEM ({exc})"]) \
                    from None
        return context


def guard_from_options(max_body_mb: float = DEFAULT_MAX_BODY_MB, token: str | None = None,
                       token_file: str | None = None, tls_cert: str | None = None,
                       tls_key: str | None = None) -> HttpGuard:
    """The guard the options ask for; raises :class:`ConfigError` with every problem, each in one line that says the
    fix. Without ``token`` or ``token_file`` the token comes from :data:`TOKEN_VARIABLE` when that is set."""
    problems = []
    if not max_body_mb > 0:
        problems.append(f"--max-body-mb {max_body_mb}: a request body of at least a few bytes must fit")
    if token is not None and token_file is not None:
        problems.append("--token and --token-file: give one of them")
    if token_file is not None:
        token = _read_text(token_file, "--token-file", problems)
    elif token is None:
        token = os.environ.get(TOKEN_VARIABLE)
    if token is not None and not token.strip():
        problems.append("the token is empty: give a secret of some length (--token-file, or $" + TOKEN_VARIABLE + ")")
    if (tls_cert is None) != (tls_key is None):
        problems.append("--tls-cert and --tls-key go together: the certificate and its private key (PEM files)")
    cert = _read_bytes(tls_cert, "--tls-cert", problems) if tls_cert else None
    key = _read_bytes(tls_key, "--tls-key", problems) if tls_key else None
    if problems:
        raise ConfigError(problems)
    guard = HttpGuard(int(max_body_mb * 2**20), token.strip() if token is not None else None, cert, key)
    guard.ssl_context()  # a file that is no certificate and key is refused now, not when the server starts
    return guard


def _read_bytes(path: str, option: str, problems: list[str]) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        problems.append(f"{option} {path}: cannot read it ({exc.strerror or exc})")
        return None


def _read_text(path: str, option: str, problems: list[str]) -> str | None:
    data = _read_bytes(path, option, problems)
    return None if data is None else data.decode(errors="replace")
