"""``--adapt`` on an embedded cluster: a run started through daskrl.train with ``--adapt 1:4`` grows its cluster on
its own, and the rollout workers it grows there fill slots that the learner takes."""

from __future__ import annotations

from daskrl import Observer, train
from daskrl.driver.changes.elastic import ElasticGrowth

from ..helpers import run_config, slow

pytestmark = slow("elastic runs of 15 to 40 s on clusters of their own")


class StopOnceGrownWorkersFill(Observer):
    """Stops the run once a rollout worker it grew has filled slots that the learner took."""

    def on_start(self, run) -> None:
        self.growth = next(o for o in run.observers if isinstance(o, ElasticGrowth))

    def on_report(self, run, row) -> None:
        taken = run.data_path().get("slots_taken", {})
        if any(taken.get(e["component"], 0) > 0 for e in self.growth.history if e["event"] == "grew"):
            run.request_stop("a grown rollout worker filled slots")


def test_adapt_grows_the_embedded_cluster_to_more_rollout_workers(tmp_path, capsys):
    config = run_config(tmp_path, "adapt", adapt="1:4", train_for_seconds=120, train_for_env_steps=0,
                        report_interval=0.5)
    summary = train(config, observers=[StopOnceGrownWorkersFill()])
    assert summary["stop_reason"] == "a grown rollout worker filled slots", summary["stop_reason"]
    out = capsys.readouterr().out
    grew = [e for e in summary["elastic"] if e["event"] == "grew"]
    assert len(grew) >= 1, (summary["elastic"], out)
    rollout = {n for n in summary["data_path"]["slots_filled"]}
    assert len(rollout) >= 2, rollout  # started with one (MIN 1 holds a learner and one rollout worker)
    assert "rollout_0" in rollout
