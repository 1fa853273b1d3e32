"""``daskrl sweep``: its flags, and a spec built from a spec file with the flags over it (or from flags alone).

    daskrl sweep cartpole.yaml
    daskrl sweep --env CartPole-v1 --param learning_rate=1e-4,3e-4,1e-3 --param num_epochs=1:4:int \\
        --search random --trials 8 --seeds 2 --budget-env-steps 300000 --early-stopping asha
    daskrl sweep --param learning_rate=1e-4,3e-4 --task HalfCheetah-v5=5819:-280 --task Swimmer-v5=281.6
    daskrl sweep --resume train_dir/cartpole
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from daskrl.errors import ConfigError
from daskrl.sweep.spec import EARLY_STOPPING, SEARCHES, read_spec_data, spec_from_dict

#: flags that go into the spec as they are (flag dest -> spec key)
_SPEC_FLAGS = ("name", "search", "trials", "seeds", "budget_env_steps", "early_stopping", "rungs", "reduction",
               "concurrent", "search_seed")


def add_sweep_parser(sub: Any) -> None:
    p = sub.add_parser("sweep", help="run many trials (a grid, random or Optuna search, several seeds each) on one "
                                     "cluster, with early stopping", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("spec", nargs="?", help="a sweep spec file (YAML or JSON); flags go over it")
    p.add_argument("--resume", metavar="DIR", default="", help="continue the sweep in DIR (its unfinished trials)")
    p.add_argument("--train-dir", default="train_dir", help="directory that holds the sweep's directory")
    p.add_argument("--scheduler", default="", help="address of a Dask scheduler (default: an embedded cluster)")
    p.add_argument("--env", help="the env of every trial (as --set env=ID)")
    p.add_argument("--set", action="append", default=[], metavar="OPTION=VALUE",
                   help="an option every trial shares (repeatable; VALUE as JSON where it parses)")
    p.add_argument("--param", action="append", default=[], metavar="OPTION=VALUES",
                   help="an option searched: V1,V2,... or LOW:HIGH[:log][:int] (repeatable)")
    p.add_argument("--task", action="append", default=[], metavar="ENV=REFERENCE[:RANDOM]",
                   help="run every configuration on this env too, its return scored 0 at RANDOM (default 0) and 1 "
                        "at REFERENCE (repeatable; instead of --env)")
    p.add_argument("--name", help="the sweep's name (its directory under --train-dir)")
    p.add_argument("--search", choices=SEARCHES, help="grid, random, or Optuna's tpe / cmaes")
    p.add_argument("--trials", type=int, help="configurations a random or Optuna search tries")
    p.add_argument("--seeds", type=int, help="seeds per configuration")
    p.add_argument("--budget-env-steps", type=int, help="env steps of a full trial")
    p.add_argument("--early-stopping", choices=EARLY_STOPPING, help="asha, median (Optuna's pruner) or none")
    p.add_argument("--rungs", type=int, help="ASHA's rungs (the last is the full budget)")
    p.add_argument("--reduction", type=int, help="ASHA's reduction factor")
    p.add_argument("--concurrent", type=int, help="trials at once (default: as many as the cluster holds)")
    p.add_argument("--search-seed", type=int, help="seed of the random draws and of Optuna's sampler")


def spec_from_args(args: argparse.Namespace) -> Any:
    """The spec of ``daskrl sweep``'s flags (over the spec file's, when one is given)."""
    data: dict[str, Any] = read_spec_data(args.spec) if args.spec else {}
    for key in _SPEC_FLAGS:
        if getattr(args, key) is not None:
            data[key] = getattr(args, key)
    base = dict(data.get("base") or {})
    if args.env:
        base["env"] = args.env
    base.update(dict(_pair(item, "--set", _json_or_text) for item in args.set))
    space = dict(data.get("space") or {})
    space.update(dict(_pair(item, "--param", _domain) for item in args.param))
    if not space:
        raise ConfigError(["a sweep needs at least one option to search: give a spec file with a 'space', or "
                           "--param OPTION=V1,V2"])
    tasks = dict(data.get("tasks") or {})
    tasks.update(dict(_pair(item, "--task", _task_scale) for item in args.task))
    data.update(base=base, space=space, **({"tasks": tasks} if tasks else {}))
    return spec_from_dict(data)


def _pair(item: str, flag: str, parse: Any) -> tuple[str, Any]:
    name, sep, value = item.rpartition("=") if flag == "--task" else item.partition("=")
    if not sep or not name:
        raise ConfigError([f"{flag} {item!r}: expected OPTION=VALUE"])
    try:
        return (name.strip() if flag == "--task" else name.strip().replace("-", "_")), parse(value)
    except ValueError as exc:
        raise ConfigError([f"{flag} {item!r}: {exc}"]) from exc


def _task_scale(text: str) -> dict[str, float]:
    """``REFERENCE`` or ``REFERENCE:RANDOM``."""
    reference, _, random = text.partition(":")
    return {"reference": float(reference), "random": float(random or 0.0)}


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _domain(text: str) -> Any:
    """``a,b,c`` (values) or ``low:high[:log][:int]`` (a range)."""
    if ":" in text:
        low, high, *flags = text.split(":")
        unknown = [f for f in flags if f not in ("log", "int")]
        if unknown:
            raise ValueError(f"a range's flags are log and int, got {', '.join(unknown)}")
        lo, hi = float(low), float(high)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError("a range needs finite ends")
        return {"low": lo, "high": hi, "log": "log" in flags, "type": "int" if "int" in flags else "float"}
    return [_json_or_text(v) for v in text.split(",") if v != ""]


def print_result(result: dict[str, Any]) -> None:
    rows = result["rows"]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    print(f"daskrl sweep: {result['ended']}: {len(rows)} trials ("
          + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + f"); table in {result['sweep_dir']}/sweep.csv")
    best = result["best"]
    if best is not None:
        values = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in best["params"].items())
        digits = 3 if result["measure"] == "score" else 1
        mean, iqm = (round(best[k], digits) for k in ("mean_return", "iqm"))
        low, high = best["ci"]
        print(f"daskrl sweep: best configuration c{best['configuration']:03d} ({values}): mean {result['measure']} "
              f"{mean}, IQM {iqm} [{low:.{digits}f}, {high:.{digits}f}]")
    if result["ended"] != "done":
        print(f"daskrl sweep: continue with: daskrl sweep --resume {result['sweep_dir']}")
