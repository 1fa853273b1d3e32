"""A learner whose worker will retire (``dask worker --lifetime``, as dask-jobqueue ends a batch job's workers before
the walltime) moves before it does, on a cluster of ``dask`` CLI processes: the move is one line, it takes seconds,
it is no fault, the slots both learners took are counted, and the run trains on to its end."""

from __future__ import annotations

import time

import daskrl
from daskrl.driver.changes import retirements
from daskrl.runtime.dask_internals import worker_retirements

from ..helpers import REPORT_OFTEN, SMALL_CARTPOLE, run_config, slow, start_cli_cluster

#: how long before its worker retires the learner moves, here: a CartPole learner moves in seconds, so the test
#: asks for less warning than a run's default (retirements.MOVE_AHEAD_S, sized for large learners) and ends sooner
MOVE_AHEAD_S = 20.0
#: the learner's worker lives long enough to start the run, then retires within the run
LIFETIME_S = MOVE_AHEAD_S + 20


@slow("a dask CLI cluster whose learner worker retires 40 s in; the run trains on past the retirement")
def test_a_learner_moves_off_a_retiring_worker_before_it_leaves(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(retirements, "MOVE_AHEAD_S", MOVE_AHEAD_S)
    # w0 is pinned for the learner and retires; w1 runs the rollout worker; w2 joins idle and stays
    def args(i: int) -> list[str]:
        return ["--resources", "learner=1", "--lifetime", f"{LIFETIME_S:g}s"] if i == 0 else []

    with start_cli_cluster(tmp_path, 3, args) as cluster:
        client = cluster["client"]
        plan = worker_retirements(client, list(client.scheduler_info()["workers"]))
        assert sorted(at is None for at in plan.values()) == [False, True, True], plan  # one worker retires
        config = run_config(tmp_path, "moves", base={**SMALL_CARTPOLE, **REPORT_OFTEN}, elastic=True,
                            train_for_seconds=LIFETIME_S + 15.0, train_for_env_steps=0, max_learner_restarts=0)
        rows: list[tuple[float, int]] = []
        summary = daskrl.train(config, client=client, on_report=lambda row: rows.append((time.time(),
                                                                                          row["env_steps"])))
    out = capsys.readouterr().out
    moves = summary["learner_moves"]
    assert len(moves) == 1, (moves, out)
    move = moves[0]
    # it fits the warning and ends before its worker leaves (how long a move takes is measured alone, not beside
    # other tests: benchmarks/job_turnover.py, 2-3 s; 2.7 s here alone, 10.8 s once in CI beside another test file)
    assert move["move_s"] < MOVE_AHEAD_S, move
    assert move["retires_in_s"] > 0, move
    assert f"learner moved from {move['from']}" in out
    assert summary["recoveries"] == [], summary["recoveries"]  # no fault: nothing was lost
    before = max(steps for t, steps in rows if t <= move["time"])
    after = [steps for t, steps in rows if t > move["time"] + 20]
    assert after and after[-1] > before + 20_000, (before, after)  # and it trained on, on the new worker
    # the slots both learners took count: the moved learner's last statistics are not replaced by its successor's
    path = summary["data_path"]
    filled, taken = path["slots_filled"]["rollout_0"], path["slots_taken"].get("rollout_0", 0)
    assert 0.95 * filled <= taken <= filled, (filled, taken)


def test_workers_without_a_lifetime_have_no_retirement(tmp_path):
    with start_cli_cluster(tmp_path, 1) as cluster:
        client = cluster["client"]
        assert list(worker_retirements(client, list(client.scheduler_info()["workers"])).values()) == [None]
