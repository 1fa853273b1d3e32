"""The replay shards' table on the daskrl page (off-policy runs): per shard its host, fill, transitions added,
minibatches served, requests waiting and slots held, and with --dataset its part of the dataset, from the entries
:mod:`daskrl.monitor.replay_stats` makes."""

from __future__ import annotations

import html
from typing import Any

_STYLE = ("<style>.daskrl-replay table {border-collapse: collapse} .daskrl-replay th, .daskrl-replay td "
          "{padding: 2px 10px; text-align: left; border-bottom: 1px solid #ddd}</style>")
_HEAD = ("shard", "host", "size / capacity", "added", "served", "waiting requests", "held slots",
         "slots via shm / comms", "rollout workers")


def replay_table_html(shards: list[dict[str, Any]]) -> str:
    """The shards as an HTML table (empty text for a run without shards: an APPO run's page shows nothing)."""
    if not shards:
        return ""
    lines, datasets = [], any(s.get("dataset_size") for s in shards)
    for s in shards:
        fill = s["size"] / s["capacity"] if s.get("capacity") else 0.0
        values = [s["shard"], s.get("host", ""), f"{s['size']:,} / {s['capacity']:,} ({100 * fill:.0f}%)",
                  f"{s['added']:,}", f"{s['served']:,}", f"{s['waiting_requests']:,}", f"{s['held_slots']:,}",
                  f"{s.get('slots_shm', 0):,} / {s.get('slots_comms', 0):,}", ", ".join(s.get("rollout_workers", []))]
        if datasets:
            values.append(f"{s.get('dataset_size', 0):,} in {s.get('dataset_episodes', 0):,} episodes")
        lines.append("<tr class='daskrl-replay-shard'>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in values)
                     + "</tr>")
    held, cap = sum(s["size"] for s in shards), sum(s["capacity"] for s in shards)
    head = "".join(f"<th>{h}</th>" for h in _HEAD + (("dataset transitions",) if datasets else ()))
    data = sum(s.get("dataset_size", 0) for s in shards)
    preloaded = f", and {data:,} of the dataset" if datasets else ""
    return (f"{_STYLE}<div class='daskrl-replay' style='font-size:13px'><b>replay shards</b> ({len(shards)}, "
            f"{held:,} of {cap:,} transitions held{preloaded})<table><tr>{head}</tr>{''.join(lines)}</table></div>")
