"""A tiny process that ends the processes and removes the shared memory an env package created, once the process
that built those envs is gone, however it went.

VizDoom runs each game as a ``vizdoom`` engine process that talks to its env through ``/dev/shm/ViZDoom*`` entries.
When the process that built the env dies without closing it (SIGKILL, out of memory, a segfault), the engines are
re-parented to init and keep running, and their entries stay until reboot; a kill of the whole process group ends
the engines but leaves the entries. :mod:`daskrl.envs.owned_processes` starts one watcher per process that builds
such envs, in a session of its own (so no signal to the owner's process group reaches it), and tells it, one JSON
line on its stdin per env, which processes (pid and start time, so a recycled pid is never touched) and entries
the env created. When the owner closes an env cleanly it says so (``forget``), and the watcher drops them.

While the owner builds an env, its environment holds ``DASKRL_ENV_OWNER=<pid>:<start time>``, which the processes
the env starts inherit: an engine started by an env whose build the owner did not finish (it was killed meanwhile)
is found by that mark and ended too, by its owner's watcher, or by any watcher on the host within
``ORPHAN_SWEEP_SECONDS`` when the owner had none yet (it died in its first env's build).

The watcher learns of its owner's end from its stdin (end of file: every copy of the pipe's write end is closed)
or from its parent pid changing (a process the owner forked without exec may still hold a copy of the pipe).
Then it ends what it was told of: SIGTERM, then SIGKILL after ``GRACE_SECONDS`` (a VizDoom engine ignores SIGTERM
when its controller is gone), removes the entries and exits.

    python daskrl/runtime/cleanup/process_watcher.py OWNER_PID

Started by path, standard library and psutil only, like the reaper beside it (and sharing ``procfs`` with it): it
costs about 16 MB and 0.09 s of CPU at start, not the package's imports. This folder is then first on ``sys.path``,
so no module in it may carry a standard-library module's name.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time

if __package__:
    from daskrl.runtime.cleanup import procfs
else:  # started by path
    import procfs  # type: ignore[no-redef]

GRACE_SECONDS = 1.0
POLL_SECONDS = 0.5
ORPHAN_SWEEP_SECONDS = 10.0
#: set in the environment of a process while it builds envs, so that what an env starts carries its owner's name
OWNER_VARIABLE = "DASKRL_ENV_OWNER"
#: entries that are not an env's: daskrl's own segments (its reaper's job), multiprocessing's semaphores
NOT_ENV_ENTRIES = ("daskrl_", "sem.mp-")
DASKRL_HELPERS = ("process_watcher.py", "reaper.py")  # started by path, outlive their owner on purpose


def _still_running(processes: dict[int, int]) -> list[int]:
    return [pid for pid, started in processes.items() if procfs.start_time(pid) == started]


def end_processes(processes: dict[int, int], grace: float = GRACE_SECONDS) -> None:
    """SIGTERM each process that is still the one recorded (same pid, same start time), SIGKILL what outlives
    ``grace`` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        running = _still_running(processes)
        for pid in running:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait
        while running and time.monotonic() < deadline:
            time.sleep(0.02)
            running = _still_running(processes)
        if not running:
            return


def owner_mark(pid: int) -> str:
    """The value of :data:`OWNER_VARIABLE` for processes started by the envs of ``pid``: its pid and start time."""
    return f"{pid}:{procfs.start_time(pid)}"


def _marked_owner(pid: int) -> str | None:
    return procfs.environment(pid).get(OWNER_VARIABLE)


def _owner_alive(mark: str) -> bool:
    pid, _, started = mark.partition(":")
    return pid.isdigit() and str(procfs.start_time(int(pid))) == started


def _daskrl_helper(pid: int) -> bool:
    return any(arg.endswith(DASKRL_HELPERS) for arg in procfs.command_line(pid))


def marked_orphans(owner: str | None = None) -> dict[int, int]:
    """Processes started while an env was built whose owner is gone (or is ``owner``, a mark): pid -> start time.
    This finds an engine that its owner did not get to record (it died while building the env). daskrl's own
    helpers are never among them, even if one was started while another thread built an env."""
    found = {}
    for pid in procfs.all_pids():
        if pid != os.getpid():
            mark = _marked_owner(pid)
            if mark is not None and (mark == owner or not _owner_alive(mark)) and not _daskrl_helper(pid):
                started = procfs.start_time(pid)
                if started is not None:
                    found[pid] = started
    return found


def entries_in_use(pids: list[int]) -> set[str]:
    """The ``/dev/shm`` entries (not daskrl's own) that any of ``pids`` maps or holds open."""
    return {name for name in procfs.shm_in_use(pids) if not name.startswith(NOT_ENV_ENTRIES)}


def end_orphans(owner: str | None = None) -> None:
    """End :func:`marked_orphans` and remove the entries they used."""
    orphans = marked_orphans(owner)
    if orphans:
        entries = entries_in_use(list(orphans))
        end_processes(orphans)
        remove_entries(entries)


def remove_entries(names: set[str]) -> None:
    for name in names:
        try:
            os.unlink(os.path.join(procfs.SHM_DIR, name))
        except (FileNotFoundError, PermissionError, IsADirectoryError):
            pass


def apply(message: dict, processes: dict[int, int], entries: set[str]) -> None:
    """One line from the owner: ``{"watch": {"processes": [[pid, start], ...], "entries": [...]}}`` or ``"forget"``
    with the same fields."""
    for verb, body in message.items():
        pids = {int(pid): int(started) for pid, started in body.get("processes", [])}
        names = set(body.get("entries", []))
        if verb == "watch":
            processes.update(pids)
            entries |= names
        elif verb == "forget":
            for pid in pids:
                processes.pop(pid, None)
            entries -= names


def take_lines(buffer: bytes, processes: dict[int, int], entries: set[str]) -> bytes:
    """Apply the whole lines of ``buffer`` (a line that does not parse, which only a write cut short by the owner's
    death can leave, is skipped); returns the unfinished rest."""
    *lines, rest = buffer.split(b"\n")
    for line in lines:
        try:
            message = json.loads(line) if line.strip() else None
        except ValueError:
            continue
        if isinstance(message, dict):
            apply(message, processes, entries)
    return rest


def unread(fd: int) -> bytes:
    """What the pipe holds now, read without waiting. The owner's last lines may be there unread when it is gone: a
    watcher that was still starting (a loaded machine) finds its parent changed before its first read."""
    data = b""
    while select.select([fd], [], [], 0)[0]:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    return data


def watch(owner: int) -> None:
    """Follow the owner's messages until it is gone, then end and remove what it left (also when this process is
    asked to stop with SIGTERM). Every ``ORPHAN_SWEEP_SECONDS`` it also ends what dead owners left unrecorded."""
    mark = owner_mark(owner)
    processes: dict[int, int] = {}
    entries: set[str] = set()
    pending = b""
    stdin = sys.stdin.fileno()
    swept = -ORPHAN_SWEEP_SECONDS
    try:
        while os.getppid() == owner:
            if time.monotonic() - swept >= ORPHAN_SWEEP_SECONDS:
                end_orphans()
                swept = time.monotonic()
            ready, _, _ = select.select([stdin], [], [], POLL_SECONDS)
            if not ready:
                continue
            chunk = os.read(stdin, 65536)
            if not chunk:  # the owner is gone (or closed the pipe on purpose: the same for what it left)
                break
            pending = take_lines(pending + chunk, processes, entries)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # what the owner left is ended and removed in full
        take_lines(pending + unread(stdin), processes, entries)
        end_processes(processes)
        remove_entries(entries)
        end_orphans(mark)  # started by an env the owner was still building when it died


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(0)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the run must not end the watcher first
    signal.signal(signal.SIGTERM, _stop)
    watch(int(sys.argv[1]))
