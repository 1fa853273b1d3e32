"""The docs in step with the code.

- The message table of docs/architecture.md names exactly the payloads (``TypedDict``s), work queues, signals and
  scheduler event topics of daskrl/protocol.py: a message added to one and not the other fails here, by name.
- Every file of this repository the docs and the README name (``daskrl/driver/loop/live_run.py``, ``benchmarks/soak.py``,
  ``runtime/memory/params.py`` inside the package map) exists, and every dotted daskrl name they give
  (``daskrl.testing.mappings:by_role``) imports.
- docs/architecture.md names every module of the package (its "Every module" list), so a newcomer finds each one's job.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import daskrl
from daskrl import protocol

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(daskrl.__file__).parent
ARCHITECTURE = ROOT / "docs" / "architecture.md"
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
#: the header of the message table in docs/architecture.md
TABLE_HEADER = "| message | from → to | how | payload |"


@dataclass(frozen=True)
class Messages:
    """What a message table or protocol.py names, by kind."""

    payloads: frozenset[str]  # TypedDict names
    queues: frozenset[str]  # work-queue prefixes, such as "free:"
    signals: frozenset[str]  # signal names
    topics: frozenset[str]  # scheduler event topics


def protocol_messages(namespace: dict[str, Any], source: str) -> Messages:
    """The messages of a protocol module: its TypedDicts, the prefixes its ``*_queue`` functions give, the signals
    its wiring connects (the first argument of each ``connect(...)``), and its ``*_TOPIC`` names."""
    payloads = {name for name, value in namespace.items() if typing.is_typeddict(value)}
    queues = {value("x").split(":")[0] + ":" for name, value in namespace.items()
              if name.endswith("_queue") and callable(value)}
    topics = {value for name, value in namespace.items() if name.endswith("_TOPIC") and isinstance(value, str)}
    signals = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "connect" and node.args:
            if isinstance(node.args[0], ast.Attribute):
                signals.add(node.args[0].attr)
    return Messages(frozenset(payloads), frozenset(queues), frozenset(signals), frozenset(topics))


def table_rows(markdown: str) -> list[list[str]]:
    """The cells of each row of the message table (the header and its separator left out)."""
    lines = markdown.splitlines()
    assert TABLE_HEADER in lines, f"docs/architecture.md has no message table (a line {TABLE_HEADER!r})"
    rows = []
    for line in lines[lines.index(TABLE_HEADER) + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def table_messages(rows: list[list[str]]) -> Messages:
    """What the table names: payload types in the first column, and in the "how" column the work queues
    (`` `free:<worker>` ``), signals (``signal `name` ``) and event topics (`` `daskrl-...` ``)."""
    payloads, queues, signals, topics = set(), set(), set(), set()
    for message, _route, how, *_ in rows:
        payloads |= set(re.findall(r"`([A-Z]\w+)`", message))
        queues |= {name + ":" for name in re.findall(r"`([a-z_]+):[^`]*`", how)}
        signals |= set(re.findall(r"signal `(\w+)`", how))
        topics |= set(re.findall(r"`(daskrl-[a-z-]+)`", how))
    return Messages(frozenset(payloads), frozenset(queues), frozenset(signals), frozenset(topics))


@functools.cache
def declared_signals() -> frozenset[str]:
    """Every ``@signal`` a daskrl component declares (a table's signal must be one of these); parsed once per test
    session (every daskrl module: about 0.3 s, which a test that removes each row in turn paid per row)."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and any(getattr(d, "id", None) == "signal" for d in node.decorator_list):
                found.add(node.name)
    return frozenset(found)


def mismatches(table: Messages, code: Messages, signals_declared: frozenset[str]) -> list[str]:
    """Each message one side names and the other lacks, in one line."""
    problems = []
    for kind in ("payloads", "queues", "topics"):
        in_table, in_code = getattr(table, kind), getattr(code, kind)
        problems += [f"{kind}: {name} is in protocol.py but not in the table" for name in sorted(in_code - in_table)]
        problems += [f"{kind}: {name} is in the table but not in protocol.py" for name in sorted(in_table - in_code)]
    problems += [f"signals: {name} is wired in protocol.py but not in the table"
                 for name in sorted(code.signals - table.signals)]
    problems += [f"signals: {name} is in the table but no component declares it"
                 for name in sorted(table.signals - signals_declared)]
    return problems


def real_protocol() -> Messages:
    return protocol_messages(vars(protocol), Path(protocol.__file__).read_text())


def real_table() -> list[list[str]]:
    return table_rows(ARCHITECTURE.read_text())


def without_row(rows: list[list[str]], mentioning: str) -> list[list[str]]:
    kept = [row for row in rows if mentioning not in " ".join(row)]
    assert len(kept) == len(rows) - 1, f"expected one row naming {mentioning!r}"
    return kept


# ---- the message table ----


def test_the_scan_finds_the_protocol():
    """Guards the checks below against a scan that finds nothing and so passes vacuously."""
    code = real_protocol()
    assert len(code.payloads) >= 4 and len(code.queues) >= 3 and len(code.topics) >= 5 and code.signals
    assert code.signals <= declared_signals()


def test_the_message_table_names_exactly_the_messages_of_protocol_py():
    problems = mismatches(table_messages(real_table()), real_protocol(), declared_signals())
    assert not problems, "docs/architecture.md's message table and daskrl/protocol.py differ:\n" + "\n".join(problems)


def test_a_missing_row_is_caught():
    rows = real_table()
    for payload in sorted(real_protocol().payloads):
        problems = mismatches(table_messages(without_row(rows, f"`{payload}`")), real_protocol(), declared_signals())
        assert f"payloads: {payload} is in protocol.py but not in the table" in problems
    topic = sorted(real_protocol().topics)[0]
    problems = mismatches(table_messages(without_row(rows, f"`{topic}`")), real_protocol(), declared_signals())
    assert problems == [f"topics: {topic} is in protocol.py but not in the table"]


def test_a_row_that_protocol_py_lacks_is_caught():
    rows = real_table() + [["`WeightsPushed`", "learner → anyone", "signal `weights_pushed`, queue `weights:<w>`,"
                            " topic `daskrl-weights`", "`{version}`"]]
    problems = mismatches(table_messages(rows), real_protocol(), declared_signals())
    assert problems == ["payloads: WeightsPushed is in the table but not in protocol.py",
                        "queues: weights: is in the table but not in protocol.py",
                        "topics: daskrl-weights is in the table but not in protocol.py",
                        "signals: weights_pushed is in the table but no component declares it"]


def test_a_message_added_to_protocol_py_alone_is_caught():
    class WeightsPushed(typing.TypedDict):
        version: int

    def weights_queue(worker: str) -> str:
        return f"weights:{worker}"

    source = Path(protocol.__file__).read_text() + "\nconnect(learner.weights_pushed, sampler.on_weights, client)\n"
    namespace = {**vars(protocol), "WeightsPushed": WeightsPushed, "weights_queue": weights_queue,
                 "WEIGHTS_TOPIC": "daskrl-weights"}
    problems = mismatches(table_messages(real_table()), protocol_messages(namespace, source), declared_signals())
    assert problems == ["payloads: WeightsPushed is in protocol.py but not in the table",
                        "queues: weights: is in protocol.py but not in the table",
                        "topics: daskrl-weights is in protocol.py but not in the table",
                        "signals: weights_pushed is wired in protocol.py but not in the table"]


# ---- paths and names the docs give ----

#: top-level folders of the repository, and daskrl's own packages (a path such as ``runtime/memory/params.py`` in the map)
TOP_FOLDERS = ("daskrl", "benchmarks", "examples", "tests", "docs")
PACKAGES = tuple(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())


def named_files(text: str) -> set[str]:
    """Repository paths in a doc: ``folder/.../name.py`` or ``.md`` starting at a top folder or a daskrl package."""
    found = set()
    for path in re.findall(r"(?<![\w./-])((?:[\w-]+/)+[\w-]+\.(?:py|md))", text):
        first = path.split("/")[0]
        if first in TOP_FOLDERS:
            found.add(path)
        elif first in PACKAGES:
            found.add(f"daskrl/{path}")
    return found


def dotted_names(text: str) -> set[str]:
    """``daskrl.a.b`` and ``daskrl.a:b`` names in backticks or code (two parts or more after ``daskrl``)."""
    return set(re.findall(r"\bdaskrl(?:\.\w+){2,}(?::\w+)?|\bdaskrl(?:\.\w+)+:\w+", text))


def resolves(name: str) -> bool:
    """Whether ``daskrl.x.y[:attr]`` is a module, or an attribute of the longest module prefix."""
    dotted, _, attr = name.partition(":")
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:] + ([attr] if attr else []):
            if not hasattr(obj, part):
                return False
            obj = getattr(obj, part)
        return True
    return False


def test_every_file_the_docs_name_exists():
    missing = [f"{doc.relative_to(ROOT)}: {path}" for doc in DOCS for path in sorted(named_files(doc.read_text()))
               if not (ROOT / path).exists()]
    assert not missing, "the docs name files that do not exist:\n" + "\n".join(missing)


def test_every_dotted_daskrl_name_in_the_docs_imports():
    broken = [f"{doc.relative_to(ROOT)}: {name}" for doc in DOCS for name in sorted(dotted_names(doc.read_text()))
              if not resolves(name)]
    assert not broken, "the docs name daskrl objects that do not import:\n" + "\n".join(broken)


def test_the_path_checks_find_a_wrong_path():
    text = ("see `daskrl/driver/nowhere.py`, `runtime/memory/params.py`, `daskrl.driver.nowhere.thing` and "
            "`daskrl.testing.mappings:x_y`")
    assert named_files(text) == {"daskrl/driver/nowhere.py", "daskrl/runtime/memory/params.py"}
    assert dotted_names(text) == {"daskrl.driver.nowhere.thing", "daskrl.testing.mappings:x_y"}
    assert not (ROOT / "daskrl/driver/nowhere.py").exists() and (ROOT / "daskrl/runtime/memory/params.py").exists()
    assert not resolves("daskrl.driver.nowhere.thing") and not resolves("daskrl.testing.mappings:x_y")
    assert resolves("daskrl.testing.mappings:by_role") and resolves("daskrl.runtime.memory.shm")


def test_every_env_family_is_named_in_the_help_and_the_training_table():
    from daskrl.config.env_defaults import FAMILIES
    from daskrl.config.options import RunConfig

    help_text = next(f for f in dataclasses.fields(RunConfig) if f.name == "env_defaults").metadata["help"]
    table = (ROOT / "docs" / "training.md").read_text().split("## Defaults per env family")[1].split("\n## ")[0]
    rows = [line.split("|")[1] for line in table.splitlines() if line.startswith("| ")]
    for family in FAMILIES:
        short = family.name.split(" (")[0]
        assert short in help_text, f"--env-defaults' help does not name the {family.name} family"
        assert any(family.name in row or short in row for row in rows), f"docs/training.md has no row for {family.name}"


def test_the_architecture_names_every_module():
    doc = ARCHITECTURE.read_text()
    missing = [path for path in sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
                                       if p.name != "__init__.py") if f"`{path}`" not in doc]
    assert not missing, ("docs/architecture.md's \"Every module\" list misses these modules (add a line each: the path "
                         f"and the first sentence of its docstring): {missing}")
