"""Kill drill: SIGKILL a training run again and again, many times while it writes a checkpoint, and check that every
``--resume`` loads the newest complete checkpoint (never a partial one) and says which.

Run:  python benchmarks/kill_drill.py --kills 30 [--json]

Each round starts ``daskrl train --env CartPole-v1`` (a wide model, so a checkpoint takes a while to write, and a
checkpoint every 0.3 s) in a session of its own, ``--resume`` from the second round on, and SIGKILLs the driver:
every other round the moment a checkpoint write is seen under way (a temporary file in ``checkpoints/``), the
others at a random moment of the first seconds (start-up included). Before each resume the drill finds the newest
complete checkpoint itself (the newest ``checkpoint_*.pt`` that loads), and the resumed run must name that one in
its "resuming from" line. A last round resumes and stops with Ctrl-C: its exit code must be 0. At the end no
process of the drill's runs and no ``/dev/shm`` segment of theirs may be left. With ``--json`` the last line is
one JSON object with the counts.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import torch

from daskrl.runtime.cleanup.segments import list_segments, owner_pid

RESUMED = re.compile(r"resuming from (checkpoints/checkpoint_(\d+)\.pt)")


def launch(train_dir: Path, resume: bool, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "daskrl", "train", "--env", "CartPole-v1", "--train-dir", str(train_dir),
           "--experiment", "drill", "--dashboard-address", "", "--checkpoint-interval", "0.3", "--hidden-sizes",
           "512", "512", "--train-for-env-steps", "0", "--train-for-seconds", "600", "--report-interval", "1"]
    with open(log, "w") as out:
        return subprocess.Popen(cmd + (["--resume"] if resume else []), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def newest_complete(checkpoints: Path) -> int | None:
    """The env steps of the newest checkpoint that loads whole."""
    for path in sorted(checkpoints.glob("checkpoint_*.pt"), reverse=True):
        try:
            torch.load(path, map_location="cpu", weights_only=False)
        except Exception:
            continue
        return int(path.stem.split("_")[1])
    return None


def wait_for(condition, timeout: float, proc: subprocess.Popen | None = None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        if proc is not None and proc.poll() is not None:
            return bool(condition())
        time.sleep(0.001)
    return False


def writing(checkpoints: Path) -> bool:
    try:
        return any(name.startswith(".tmp_") for name in os.listdir(checkpoints))
    except FileNotFoundError:
        return False


def session_pids(proc: subprocess.Popen) -> set[int]:
    """The processes of a run's session (its driver, scheduler's nannies' workers, forkserver) now."""
    return {p.pid for p in psutil.process_iter(["pid"]) if _session_of(p.pid) == proc.pid}


def kill_run(proc: subprocess.Popen, ours: set[int]) -> list[int]:
    """SIGKILL the driver (as ``kill -9 PID``); returns the pids of its session still alive 30 s later (``ours``
    gains them all: the owners of the segments the drill's runs may leave)."""
    session = [p for p in (_process(pid) for pid in session_pids(proc)) if p is not None]
    ours.update(p.pid for p in session)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        alive = [p.pid for p in session if _alive(p)]
        if not alive:
            return []
        time.sleep(0.2)
    return alive


def _process(pid: int) -> psutil.Process | None:
    """The process ``pid``, or None when it ended since it was listed (a short-lived child of the run's)."""
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def _alive(process: psutil.Process) -> bool:
    """Running and not a zombie (a process that ends between the two questions is not alive)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _session_of(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def resumed_steps(log: Path, proc: subprocess.Popen) -> int | None:
    """The env steps of the checkpoint the run says it resumed from (None if it never said)."""
    found: list[int] = []

    def said() -> bool:
        match = RESUMED.search(log.read_text(errors="replace"))
        if match:
            found.append(int(match.group(2)))
        return bool(found)

    wait_for(said, 60, proc)
    return found[0] if found else None


def our_segments(ours: set[int]) -> list[str]:
    """daskrl segments whose owner was a process of the drill's runs (others may be another run's on the host)."""
    return [name for name in list_segments() if owner_pid(name) in ours]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    train_dir = Path(tempfile.mkdtemp(prefix="daskrl_kill_drill_"))
    checkpoints = train_dir / "drill" / "checkpoints"
    ours: set[int] = set()
    counts = {"kills": 0, "kills_during_write": 0, "resumes": 0, "resumes_newest_complete": 0, "wrong_resumes": [],
              "partial_writes_seen": 0, "processes_left": [], "final_rc": None}
    try:
        for round_ in range(args.kills + 1):
            log = train_dir / f"round_{round_}.log"
            expected = newest_complete(checkpoints) if round_ else None
            counts["partial_writes_seen"] += sum(1 for n in os.listdir(checkpoints) if n.startswith(".tmp_")) \
                if round_ else 0
            proc = launch(train_dir, resume=round_ > 0, log=log)
            if round_:
                got = resumed_steps(log, proc)
                counts["resumes"] += 1
                if got is not None and got == expected:
                    counts["resumes_newest_complete"] += 1
                else:
                    counts["wrong_resumes"].append({"round": round_, "expected": expected, "said": got})
            if round_ == args.kills:  # the last round: stop in order
                wait_for(lambda: writing(checkpoints), 60, proc)
                ours.update(session_pids(proc))
                proc.send_signal(signal.SIGINT)
                counts["final_rc"] = proc.wait(timeout=120)
                break
            if round_ == 0:  # the first kill needs a checkpoint before it, for the next round to resume
                wait_for(lambda: newest_complete(checkpoints) is not None, 120, proc)
            if round_ % 2 == 0:
                mid_write = wait_for(lambda: writing(checkpoints), 60, proc)
            else:
                time.sleep(rng.uniform(0.5, 6.0))
                mid_write = writing(checkpoints)
            counts["kills"] += 1
            counts["kills_during_write"] += int(mid_write)
            counts["processes_left"] += kill_run(proc, ours)
            print(f"round {round_}: killed {'during a checkpoint write' if mid_write else 'at a random moment'}; "
                  f"newest complete checkpoint now at {newest_complete(checkpoints)} env steps", flush=True)
        # the reaper of the last killed run removes its segments: 5 s for that, over as soon as none is left
        wait_for(lambda: not our_segments(ours), 5)
        counts["segments_left"] = our_segments(ours)
    finally:
        shutil.rmtree(train_dir, ignore_errors=True)
    ok = (counts["resumes"] == counts["resumes_newest_complete"] and not counts["processes_left"]
          and not counts["segments_left"] and counts["final_rc"] == 0)
    print(f"kill drill: {counts['kills']} kills ({counts['kills_during_write']} during a checkpoint write); "
          f"{counts['resumes_newest_complete']} of {counts['resumes']} resumes loaded the newest complete checkpoint "
          f"and said so; {counts['partial_writes_seen']} partial writes were left by kills (removed by the resume); "
          f"processes left {len(counts['processes_left'])}, /dev/shm segments left {len(counts['segments_left'])}; "
          f"last run's exit code {counts['final_rc']}: {'PASS' if ok else 'FAIL'}")
    if args.json:
        print(json.dumps({**counts, "pass": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
