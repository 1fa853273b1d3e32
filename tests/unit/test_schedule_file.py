"""The pieces of --record-schedule that need no cluster: a slot's versions written as runs and read back, which fill
each recorded step took, and the machine manifest's differences."""

from __future__ import annotations

import numpy as np
import pytest

from daskrl.monitor.outputs.machine_manifest import CPU_FLAGS, machine_manifest, manifest_differences
from daskrl.monitor.outputs.schedule_file import Schedule
from daskrl.rerun.schedule_index import ScheduleIndex
from daskrl.sampling.slots.fill_log import FillLog, version_runs, versions_from_runs


@pytest.mark.parametrize("versions", [[4] * 8, [4, 4, 5, 5, 5, 7, 7, 9], [1, 2, 3, 4, 5, 6, 7, 8]])
def test_a_slots_versions_come_back_from_their_runs(versions):
    runs = version_runs(np.array(versions, np.int32))
    assert len(runs) == 2 * len(set(versions))
    assert versions_from_runs(runs, len(versions)).tolist() == versions


def test_the_fill_log_hands_each_entry_over_once():
    log = FillLog(worker_index=1, incarnation="ab12")
    log.filled(0, 3, np.array([2, 2, 3], np.int32))
    assert log.news() == {"fills": {"worker": 1, "inc": "ab12", "entries": [[0, 3, [0, 2, 2, 3]]]}}
    assert log.news() == {}


def test_the_kth_take_of_a_slot_is_the_kth_fill_of_that_slot():
    fills = [[0, 0, [0, 1]], [1, 1, [0, 1]], [0, 0, [0, 2]], [1, 1, [0, 2]]]  # slot 0 twice by split 0, slot 1 by 1
    schedule = Schedule({}, {}, fills={0: fills}, incarnations={0: {"inc"}}, steps=[
        {"step": 1, "slots": [["rollout_0", 1, "inc"], ["rollout_0", 0, "inc"]]},
        {"step": 2, "slots": [["rollout_0", 0, "inc"], ["rollout_0", 1, "inc"]]},
        {"step": 3, "slots": [["rollout_0", 0, "inc"]]}])  # never filled a third time: replayable up to step 2
    index = ScheduleIndex(schedule, rollout=4)
    assert [[f.position for f in step] for step in index.steps] == [[1, 0], [2, 3]]
    assert [f.position for f in index.fills_of(0, 0)] == [0, 2]
    assert index.steps[1][0].versions.tolist() == [2, 2, 2, 2]


def test_a_replaced_rollout_worker_or_a_restarted_learner_is_refused():
    schedule = Schedule({}, {}, fills={0: []}, incarnations={0: {"a", "b"}})
    with pytest.raises(ValueError, match="rollout worker 0 was replaced"):
        ScheduleIndex(schedule, rollout=4)
    restarted = Schedule({}, {}, fills={0: []}, incarnations={0: {"a"}},
                         steps=[{"step": n, "slots": []} for n in (1, 2, 3, 2, 3, 4)])  # back to its step-1 checkpoint
    with pytest.raises(ValueError, match=r"step 2 where 4 was due\): it restarted from a checkpoint"):
        ScheduleIndex(restarted, rollout=4)


def test_the_manifest_names_what_differs():
    here = machine_manifest()
    assert manifest_differences(here, here) == []
    absent = next(flag for flag in CPU_FLAGS if flag not in here["cpu_flags"])  # amx_tile is here on some machines
    other = {**here, "packages": {**here["packages"], "numpy": "1.0"}, "cpu_flags": [*here["cpu_flags"], absent],
             "daskrl_commit": "abc"}
    differences = manifest_differences(other, here)
    assert any(d.startswith("numpy 1.0 was recorded") for d in differences)
    assert f"recorded with {absent}" in " ".join(differences) and any("daskrl's commit" in d for d in differences)
