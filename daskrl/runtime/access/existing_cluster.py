"""Reaching a cluster someone else started (``--scheduler``), with what goes wrong there said in one line each.

- an address whose protocol Dask does not speak (``http://...``) is refused at once;
- a scheduler that does not answer within the connect timeout (nothing listening, a firewall) fails then, naming
  the address and the cause, instead of Dask retrying for a minute in silence;
- TLS: a ``tls://`` address needs credentials (:func:`tls_security` builds them from PEM files, as ``dask
  scheduler --tls-ca-file/--tls-cert/--tls-key`` does); a handshake that fails says so; a plain ``tcp://`` address
  of a TLS scheduler gets a hint;
- versions: the client compares dask, distributed, torch, daskrl (and Python's major.minor) with the scheduler's
  and every worker's, and refuses a mismatch, which otherwise shows up later as an unpickling error or a hang.
"""

from __future__ import annotations

import os
import ssl
from typing import Any

from distributed import Client
from distributed.security import Security

from daskrl.errors import ClusterAccessError, one_line

TLS_FLAGS = "--tls-ca-file, --tls-cert and --tls-key"
PROTOCOLS = ("tcp", "tls", "inproc", "ws", "wss", "ucx")
#: compared between this client and the cluster (the scheduler needs only Dask's, and daskrl for its plugins)
WORKER_PACKAGES = ("python", "dask", "distributed", "torch", "daskrl")
SCHEDULER_PACKAGES = ("python", "dask", "distributed", "daskrl")


def tls_security(ca_file: str = "", cert: str = "", key: str = "") -> Security | None:
    """A ``Security`` for a TLS cluster from PEM files, or None when no file is given.

    ``cert`` (with ``key``, unless the certificate file holds the key too) serves every role this process may
    play: client, and scheduler and workers of an embedded cluster, as ``dask scheduler/worker --tls-cert``
    does. Encryption is then required on every connection.
    """
    if not (ca_file or cert or key):
        return None
    problems = []
    if not ca_file:
        problems.append("--tls-ca-file (the CA that signed the cluster's certificates) is missing")
    if not cert:
        problems.append("--tls-cert (this client's certificate) is missing")
    for flag, path in (("--tls-ca-file", ca_file), ("--tls-cert", cert), ("--tls-key", key)):
        if path and not os.path.isfile(path):
            problems.append(f"{flag} {path!r} is not a file")
    if problems:
        raise ClusterAccessError("TLS: " + "; ".join(problems))
    key = key or None
    return Security(tls_ca_file=ca_file, tls_client_cert=cert, tls_client_key=key, tls_scheduler_cert=cert,
                    tls_scheduler_key=key, tls_worker_cert=cert, tls_worker_key=key, require_encryption=True)


def _has_tls_credentials(security: Any) -> bool:
    return bool(security is not None and getattr(security, "tls_ca_file", None)
                and getattr(security, "tls_client_cert", None))


def open_client(address: str, security: Any, timeout: float) -> Client:
    """``Client(address)`` within ``timeout`` seconds, with versions checked, or one readable
    :class:`ClusterAccessError` (see the module docstring)."""
    scheme = address.split("://", 1)[0] if "://" in address else "tcp"
    if scheme not in PROTOCOLS:
        raise ClusterAccessError(f"--scheduler {address}: Dask does not speak {scheme!r}; give the scheduler's "
                                 f"address as tcp://host:port (tls://host:port for a TLS cluster)")
    if scheme == "tls" and not _has_tls_credentials(security):
        raise ClusterAccessError(
            f"the scheduler {address} uses TLS, so TLS credentials are needed: pass {TLS_FLAGS} (the CA and a "
            "certificate/key pair it signed), or connect_cluster(security=distributed.security.Security(...))")
    try:
        client = Client(address, security=security, direct_to_workers=True, timeout=timeout)
    except Exception as exc:
        raise ClusterAccessError(f"cannot use the Dask scheduler at {address}: {_hint(exc, scheme, timeout)} "
                                 f"({one_line(exc)})") from exc
    try:
        check_versions(client, address)
    except BaseException:
        client.close()
        raise
    return client


def _hint(exc: BaseException, scheme: str, timeout: float) -> str:
    chain, e = [], exc
    while e is not None and len(chain) < 10:
        chain.append(e)
        e = e.__cause__ or e.__context__
    if any(isinstance(e, ssl.SSLError) for e in chain):
        return (f"the TLS handshake failed: check that {TLS_FLAGS} are the CA that signed the cluster's "
                "certificates and a certificate/key pair it trusts")
    if scheme == "tcp":
        return (f"no answer within {timeout:g} s (--connect-timeout): is a scheduler running there? If the cluster "
                f"uses TLS, give its tls:// address and {TLS_FLAGS}")
    return f"no answer within {timeout:g} s (--connect-timeout): is a scheduler running there, reachable from here?"


def check_versions(client: Client, address: str) -> None:
    """Refuse a cluster whose scheduler or workers run other versions of the packages that must agree."""
    versions = client.get_versions(check=False, packages=["torch", "daskrl"])
    mine = _packages(versions["client"])
    mismatches = _differences(mine, _packages(versions["scheduler"]), SCHEDULER_PACKAGES, "the scheduler")
    for worker, info in sorted(versions.get("workers", {}).items()):
        mismatches += _differences(mine, _packages(info), WORKER_PACKAGES, f"worker {worker}")
    if mismatches:
        shown = "; ".join(mismatches[:4]) + (f"; and {len(mismatches) - 4} more" if len(mismatches) > 4 else "")
        raise ClusterAccessError(f"the cluster at {address} runs other versions than this client: {shown}. Install "
                                 "the same versions on the client, the scheduler and every worker")


def _packages(info: dict) -> dict[str, str | None]:
    packages = dict(info.get("packages", {}))
    python = packages.get("python") or info.get("host", {}).get("python")
    packages["python"] = ".".join(str(python).split(".")[:2]) if python else None  # 3.11.7 and 3.11.9 agree
    return packages


def _differences(mine: dict, theirs: dict, names: tuple[str, ...], where: str) -> list[str]:
    out = []
    for name in names:
        if mine.get(name) != theirs.get(name):
            out.append(f"{name} {mine.get(name) or 'missing'} here, {theirs.get(name) or 'missing'} on {where}")
    return out
