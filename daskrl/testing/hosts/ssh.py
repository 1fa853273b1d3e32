"""SSH hosts on this machine, for tests and benchmarks: ``count`` network namespaces, each running OpenSSH's
``sshd`` on port 22 of its own address, all accepting one key made for the kit (root logins by key only).

    with SSHTestHosts(3) as ssh:                      # ssh.addresses: the hosts; ssh.home: a $HOME whose .ssh
        cluster = SSHCluster(ssh.addresses, connect_options=ssh.connect_options())   # holds the key and known hosts

What reaches the hosts is what reaches a real one: asyncssh (``distributed.SSHCluster``) or ``ssh`` log in and
start processes there, which see this machine's files and Python. :meth:`home` is a folder laid out as a user's
``$HOME`` (``.ssh/id_ed25519``, ``.ssh/known_hosts``), so a command run with ``HOME`` pointing there logs in as a
user whose SSH is set up would. :meth:`stop` ends the daemons, every process the logins started, and the hosts.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from daskrl.testing.hosts.daemons import Daemons, wait_until
from daskrl.testing.hosts.netns import NamespaceHosts, netns_unavailable


def ssh_unavailable() -> str:
    """Why this machine cannot run the SSH test hosts ('' when it can)."""
    missing = [cmd for cmd in ("sshd", "ssh-keygen") if shutil.which(cmd) is None and not Path(f"/usr/sbin/{cmd}").exists()]
    if missing:
        return f"{', '.join(missing)} not installed (apt-get install openssh-server)"
    try:
        import asyncssh  # noqa: F401  (distributed's SSHCluster logs in with it)
    except ImportError:
        return "asyncssh is not installed (pip install 'daskrl[ssh]')"
    return netns_unavailable()


class SSHTestHosts:
    def __init__(self, count: int = 3) -> None:
        self.hosts = NamespaceHosts("ss", count, octet=76)
        self.root = Path(tempfile.mkdtemp(prefix="daskrl_ssh_"))
        self.daemons = Daemons(self.root)

    @property
    def addresses(self) -> list[str]:
        return self.hosts.addresses

    @property
    def home(self) -> Path:
        """A ``$HOME`` whose ``.ssh`` holds the kit's client key and the hosts' keys (see the module docstring)."""
        return self.root / "home"

    @property
    def key(self) -> Path:
        return self.home / ".ssh" / "id_ed25519"

    def connect_options(self) -> dict[str, Any]:
        """asyncssh's options for these hosts (``SSHCluster(connect_options=...)``)."""
        return {"username": "root", "client_keys": [str(self.key)],
                "known_hosts": str(self.home / ".ssh" / "known_hosts")}

    def start(self) -> SSHTestHosts:
        try:
            self.hosts.up()
            self._keys()
            Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege separation folder
            for i, (ns, address) in enumerate(zip(self.hosts.names, self.addresses, strict=True)):
                config = self.root / f"sshd_{i}.conf"
                config.write_text(SSHD_CONFIG.format(address=address, root=self.root, i=i))
                sshd = shutil.which("sshd") or "/usr/sbin/sshd"
                self.daemons.start(f"sshd_{i}", [sshd, "-D", "-e", "-f", str(config)], netns=ns)
            for address in self.addresses:
                wait_until(lambda a=address: _listening(a, 22), 20, f"sshd on {address} did not listen")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """End the daemons and what their logins started, delete the hosts and the folder (idempotent)."""
        self.daemons.stop()
        self.hosts.down()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> SSHTestHosts:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _keys(self) -> None:
        dot_ssh = self.home / ".ssh"
        dot_ssh.mkdir(parents=True, mode=0o700)
        for path in (self.root / "host_key", self.key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True, timeout=30)
        (self.root / "authorized_keys").write_text(self.key.with_suffix(".pub").read_text())
        host_key = (self.root / "host_key.pub").read_text().split()
        (dot_ssh / "known_hosts").write_text("".join(f"{a} {host_key[0]} {host_key[1]}\n" for a in self.addresses))


def _listening(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=0.5):
            return True
    except OSError:
        return False


#: one host's sshd: its own address, the kit's host key and authorized key, root by key only, no PAM
SSHD_CONFIG = """\
ListenAddress {address}
Port 22
HostKey {root}/host_key
PidFile {root}/sshd_{i}.pid
AuthorizedKeysFile {root}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
"""
