"""Monitoring a run with several policies and PBT: the scheduler's store, the page's sources, the JSON endpoints,
the page in headless Chromium and the HTML report, fed with messages and files shaped as the runner writes them
(policy rows from :class:`daskrl.driver.loop.policy_book.PolicyBook`, replacements from
:class:`daskrl.pbt.population.Exploit`)."""

from __future__ import annotations

import csv
import html
import json
import math
import re
from pathlib import Path

import pytest

from daskrl.config import Config
from daskrl.driver.loop.policy_book import PolicyBook
from daskrl.monitor.dashboard import DashboardPlugin, RunPage, dashboard_page, summary_html
from daskrl.monitor.figures.policy_plots import POLICY_COLORS
from daskrl.monitor.history import MetricsStore, history_payload, json_safe, latest_payload
from daskrl.pbt.population import Exploit, PBTLog
from daskrl.protocol import METRICS_TOPIC, PBT_TOPIC
from daskrl.sampling.episode import Episode

from ..browser import CHROMIUM, Browser, colour_pixels, distinct_colours
from ..helpers import get_json, slow

RUN, POLICIES = "pbt-run", 3
HPS = {"learning_rate": 1e-3, "entropy_coef": 0.01, "clip_ratio": 0.2, "gamma": 0.99}


def policy_return(report: int, policy: int) -> float:
    return 10.0 * policy + report


def reports(tmp_path: Path, n: int) -> list[dict]:
    """``n`` metrics events of a 3-policy run, as ``Runner.report`` logs them (the rows from a real PolicyBook)."""
    config = Config().replace(train_dir=str(tmp_path), experiment=RUN, env="CartPole-v1", num_policies=POLICIES)
    book = PolicyBook(config, resuming=False)
    out = []
    try:
        for i in range(n):
            for k in range(POLICIES):
                book.episodes[k].returns.clear()  # each report's mean return is exactly policy_return()
                book.episodes[k].lengths.clear()
                book.add_episodes([Episode(policy_return(i, k), 20 + i, k)])
                book.note_learner(k, {"policy_version": i + 1, "samples_trained": 256 * i,
                                      "metrics": {"loss": 0.5 - 0.01 * k, "entropy": 0.6, "approx_kl": 0.01,
                                                  "lr": HPS["learning_rate"] * (k + 1), "valid_fraction": 1.0},
                                      "hyperparams": {**HPS, "learning_rate": HPS["learning_rate"] * (k + 1)}})
            time_s, steps = float(i + 1), 1000 * (i + 1)
            row = {"time_s": time_s, "env_steps": steps, "fps": 1000.0, "episode_return_mean": 12.0,
                   "episode_return_std": 1.0, "episodes": 3 * (i + 1), "policy_version": i + 1, "policy_lag": 0.5,
                   "loss": math.nan}
            out.append({"run": RUN, "env": "CartPole-v1", "row": _finite(row),
                        "policies": [_finite(r) for r in book.rows(time_s, steps)],
                        "shares": {"learner_p0": {"train": 0.5}}, "incidents": 0,
                        "stop_at": {"env_steps": 100_000, "seconds": 0.0}})
    finally:
        book.close()
    return out


def _finite(row: dict) -> dict:  # as the runner sends rows: NaN as None
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


def exploit(round_: int, target: int, source: int, steps: int) -> Exploit:
    after = {**HPS, "learning_rate": HPS["learning_rate"] * (source + 1) * 1.2}
    return Exploit(round_, steps, target, source, policy_return(0, target), policy_return(0, source),
                   {**HPS, "learning_rate": HPS["learning_rate"] * (target + 1)}, after, ("learning_rate",))


def pbt_event(e: Exploit, time_s: float) -> dict:
    """A ``daskrl-pbt`` event as the runner logs it."""
    return {**e.as_dict(), "run": RUN, "time_s": time_s}


EVENTS = [(exploit(1, 0, 2, 1500), 1.5), (exploit(2, 1, 2, 2500), 2.5)]


def filled_store(tmp_path: Path, n: int = 3) -> MetricsStore:
    store = MetricsStore()
    for i, msg in enumerate(reports(tmp_path, n)):
        store.add(msg, stamp=float(i))
        if i < len(EVENTS):
            store.add_pbt(pbt_event(*EVENTS[i]), stamp=i + 0.5)
    return store


def legend_labels(figure) -> list[str]:
    return [item.label.value for legend in figure.legend for item in legend.items]


# ---- the store, the page's sources, the JSON ----


def test_page_sources_have_one_series_per_policy(tmp_path):
    store = filled_store(tmp_path)
    page = RunPage(store)
    assert sorted(page.policy_sources) == [0, 1, 2]
    for k, source in page.policy_sources.items():
        data = source.data
        assert data["episode_return_mean"] == [policy_return(i, k) for i in range(3)]
        assert data["env_steps"] == [1000.0, 2000.0, 3000.0] and set(data["policy"]) == {k}
        assert data["learning_rate"] == [pytest.approx(HPS["learning_rate"] * (k + 1))] * 3
        assert data["policy_version"] == [1.0, 2.0, 3.0] and data["episode_length_mean"] == [20.0, 21.0, 22.0]
    labels = [f"policy {k}" for k in range(POLICIES)]
    for name in ("return", "length", "losses", "entropy", "kl", "learning_rate", "policy_version"):
        assert legend_labels(page.figures[name])[:POLICIES] == labels, name
    assert "PBT: target ← source" in legend_labels(page.figures["return"])
    assert page.pbt_source.data["target"] == [0, 1] and page.pbt_source.data["source"] == [2, 2]
    assert page.pbt_source.data["source_return"] == [20.0, 20.0] and page.pbt_source.data["time_s"] == [1.5, 2.5]
    assert page.pbt_table.visible and page.pbt_table.text.count("daskrl-pbt-event") == 2
    newest = page.pbt_table.text.index("policy 1 ← policy 2")
    assert newest < page.pbt_table.text.index("policy 0 ← policy 2"), "newest first"
    assert "<td>learning_rate* 0.002 → 0.0036</td>" in page.pbt_table.text  # only what changed
    assert "3 policies" in summary_html(store.get()) and "best: policy 2 (return 22.0)" in summary_html(store.get())

    # a new report streams one point into each policy's source; a new replacement reaches the markers
    msg = reports(tmp_path / "more", 4)[-1]
    store.add(msg, stamp=10.0)
    store.add_pbt(pbt_event(exploit(3, 0, 1, 4000), 4.0), stamp=10.5)
    page.update()
    assert [len(s.data["env_steps"]) for s in page.policy_sources.values()] == [4, 4, 4]
    assert page.policy_sources[1].data["episode_return_mean"][-1] == policy_return(3, 1)
    assert page.pbt_source.data["round"] == [1, 2, 3] and page.pbt_table.text.count("daskrl-pbt-event") == 3


def test_one_policy_keeps_the_run_line_and_a_restart_forgets_policies_and_pbt(tmp_path):
    store = MetricsStore()
    store.add({"run": "single", "env": "E", "row": {"time_s": 1.0, "env_steps": 10}, "policies": []})
    page = RunPage(store)
    assert page.policy_sources == {} and "length" not in page.figures and not page.pbt_table.visible
    assert legend_labels(page.figures["return"]) == ["evaluation"]  # the run's line has no legend of its own
    assert latest_payload(store)["policies"] == [] and latest_payload(store)["pbt"] == []

    store = filled_store(tmp_path)
    page = RunPage(store)
    store.add({"run": RUN, "env": "E", "row": {"time_s": 0.5, "env_steps": 5}, "policies": []})  # started again
    page.update()
    hist = store.get(RUN)
    assert hist.pbt == [] and hist.policy_ids() == [] and len(hist.rows) == 1
    assert page.policy_sources == {} and not page.pbt_table.visible


def test_json_payloads_hold_the_policy_rows_and_the_pbt_events(tmp_path):
    store = filled_store(tmp_path)
    latest = json.loads(json.dumps(json_safe(latest_payload(store)), allow_nan=False))
    assert latest["run"] == RUN and [r["policy"] for r in latest["policies"]] == [0, 1, 2]
    assert [r["episode_return_mean"] for r in latest["policies"]] == [policy_return(2, k) for k in range(3)]
    assert latest["policies"][1]["hp/learning_rate"] == pytest.approx(2e-3)
    assert [(e["round"], e["target"], e["source"]) for e in latest["pbt"]] == [(1, 0, 2), (2, 1, 2)]
    assert latest["pbt"][0]["after"]["learning_rate"] == pytest.approx(3.6e-3)
    assert latest["pbt"][0]["time_s"] == 1.5 and latest["pbt"][0]["mutated"] == ["learning_rate"]
    history = json.loads(json.dumps(json_safe(history_payload(store)), allow_nan=False))
    assert len(history["rows"]) == 3 and len(history["policies"]) == 9
    by_policy = {k: [r["episode_return_mean"] for r in history["policies"] if r["policy"] == k] for k in range(3)}
    assert by_policy == {k: [policy_return(i, k) for i in range(3)] for k in range(3)}
    assert history["pbt"] == latest["pbt"]
    assert not store.add_pbt({"run": RUN, "round": 1}) and not store.add_pbt("junk")


def test_plugin_collects_the_pbt_topic(tmp_path):
    """Events logged before the plugin starts are replayed in order; later ones arrive through log_event."""
    from distributed import Client, LocalCluster

    msgs = reports(tmp_path, 3)
    with LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster, Client(cluster) as client:
        client.log_event(METRICS_TOPIC, msgs[0])
        client.log_event(PBT_TOPIC, pbt_event(*EVENTS[0]))
        client.register_plugin(DashboardPlugin())
        client.log_event(METRICS_TOPIC, msgs[1])
        client.log_event(PBT_TOPIC, pbt_event(*EVENTS[1]))

        def seen(dask_scheduler) -> tuple:
            hist = dask_scheduler.plugins["daskrl-dashboard"].store.get(RUN)
            return len(hist.rows), hist.policy_ids(), [e["round"] for e in hist.pbt]

        assert client.run_on_scheduler(seen) == (2, [0, 1, 2], [1, 2])


# ---- the page in headless Chromium ----

# The policy sources, the legend labels and the text of the page (shadow roots included: Bokeh's Divs are there).
POLICY_PROBE = """(() => {
  const texts = (root, out) => { for (const el of root.querySelectorAll('*')) {
      if (el.shadowRoot) { out.push(el.shadowRoot.textContent || ''); texts(el.shadowRoot, out); } } return out; };
  const docs = (window.Bokeh && window.Bokeh.documents) || [];
  const models = docs.length ? [...docs[0].all_models] : [];
  const label = (m) => { const l = m.label; return typeof l === 'string' ? l : (l && (l.value ?? l.field)); };
  const sources = {};
  for (const m of models) if (m.name && m.name.startsWith('daskrl-policy-'))
      sources[m.name] = Array.from(m.data.episode_return_mean);
  return {labels: models.filter(m => m.type === 'LegendItem').map(label), sources: sources,
          text: document.body.innerText + '\\n' + texts(document, []).join('\\n')};
})()"""


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
@slow("headless Chromium")
def test_page_shows_each_policy_and_the_pbt_events_in_chromium(tmp_path):
    from distributed import Client, LocalCluster

    msgs = reports(tmp_path, 3)
    # tcp on 127.0.0.1: the dashboard link names the address it listens on (inproc would name the host's)
    with LocalCluster(n_workers=0, processes=False, protocol="tcp://", host="127.0.0.1",
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
        client.register_plugin(DashboardPlugin())
        for i, msg in enumerate(msgs):
            client.log_event(METRICS_TOPIC, msg)
            if i < len(EVENTS):
                client.log_event(PBT_TOPIC, pbt_event(*EVENTS[i]))
        page = dashboard_page(client)
        assert page and page.endswith("/daskrl"), page
        latest = get_json(f"{page}/api/latest?run={RUN}")
        assert len(latest["policies"]) == 3 and len(latest["pbt"]) == 2
        browser = Browser(tmp_path)
        try:
            probe, png = browser.inspect(page, lambda p: len(p["sources"]) == 3 and "policy 1 ← policy 2" in p["text"],
                                         probe=POLICY_PROBE)
        finally:
            browser.close()
    (tmp_path / "policies.png").write_bytes(png)
    assert probe["sources"] == {f"daskrl-policy-{k}": [policy_return(i, k) for i in range(3)] for k in range(3)}
    for k in range(POLICIES):
        assert probe["labels"].count(f"policy {k}") == 7, probe["labels"]  # one per per-policy plot
    assert "PBT: target ← source" in probe["labels"]
    text = probe["text"]
    assert "PBT replacements" in text and "policy 0 ← policy 2" in text and "policy 1 ← policy 2" in text
    assert "0.0 → 20.0" in text and "learning_rate* 0.001 → 0.0036" in text and "3 policies" in text
    assert distinct_colours(png) > 50, "the screenshot is (nearly) blank"
    for colour in POLICY_COLORS[:POLICIES]:
        assert colour_pixels(png, colour) > 30, f"no line in {colour} on the page"


# ---- the HTML report ----


def write_experiment(exp_dir: Path, tmp_path: Path) -> None:
    """metrics.csv, policies.csv and pbt.csv as a 3-policy PBT run writes them."""
    exp_dir.mkdir(parents=True)
    msgs = reports(tmp_path, 4)
    with open(exp_dir / "metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(msgs[0]["row"]))
        writer.writeheader()
        writer.writerows(m["row"] for m in msgs)
    with open(exp_dir / "policies.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(msgs[0]["policies"][0]))
        writer.writeheader()
        writer.writerows(r for m in msgs for r in m["policies"])
    log = PBTLog(str(exp_dir))
    for e, time_s in EVENTS:
        log.write(e, time_s=time_s)


def bokeh_models(page: str) -> list[dict]:
    """Every model of the report's embedded Bokeh document."""
    found = re.search(r'<script type="application/json" id="[^"]*">\s*(.*?)\s*</script>', page, re.S)
    assert found, "no Bokeh document in the report"
    out: list[dict] = []

    def walk(value) -> None:
        if isinstance(value, dict):
            if value.get("type") == "object":
                out.append(value)
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(json.loads(found.group(1)))
    return out


def test_report_draws_each_policy_and_marks_the_pbt_events(tmp_path):
    from daskrl.cli import main
    from daskrl.monitor.figures.report import read_pbt, read_policies

    exp_dir = tmp_path / "train" / RUN
    write_experiment(exp_dir, tmp_path)
    events = read_pbt(str(exp_dir))
    assert [(e["round"], e["target"], e["source"]) for e in events] == [(1, 0, 2), (2, 1, 2)]
    assert events[0]["after"]["learning_rate"] == pytest.approx(3.6e-3) and events[0]["before"]["gamma"] == 0.99
    assert len(read_policies(str(exp_dir))) == 12

    assert main(["report", "--experiment", RUN, "--train-dir", str(exp_dir.parent)]) == 0
    models = bokeh_models((exp_dir / "report.html").read_text())
    labels = [m["attributes"]["label"]["value"] for m in models if m["name"] == "LegendItem"]
    for k in range(POLICIES):
        assert labels.count(f"policy {k}") == 8, labels  # the learning curve and the 7 per-policy plots
    assert labels.count("PBT: target ← source") == 2  # on both return plots
    texts = [html.unescape(m["attributes"].get("text", "")) for m in models if m["name"] == "Div"]
    table = next(t for t in texts if "<b>PBT replacements</b>" in t)
    assert table.count("daskrl-pbt-event") == 2 and "policy 0 ← policy 2" in table and "policy 1 ← policy 2" in table
    assert "learning_rate 0.001 → 0.0036</td>" in table  # only what changed; pbt.csv has no mutated: no *
    header = next(t for t in texts if "daskrl report" in t)
    assert "3 policies" in header and "policy 2: final return 23.0" in header and "2 PBT replacements in 2 rounds" in header
    sources = [m["attributes"]["data"] for m in models if m["name"] == "ColumnDataSource"]
    assert sum(1 for d in sources if "episode_length_mean" in json.dumps(d)) == POLICIES
