"""The shape of the code, checked: no import cycle between daskrl's modules (imports inside functions and under
TYPE_CHECKING included: they only hide a loop), no import from a lower layer up, at most 10 modules at the top, no
module over 450 lines and no function over 60, no behaviour chosen by comparing class names, and one source of
defaults (daskrl/config/options.py) for everything a component is configured with."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import daskrl
from daskrl import setups
from daskrl.config.options import SECTIONS
from daskrl.runtime.actors.component import Component
from daskrl.serving.component import PolicyServer, ServeSetup

PACKAGE = Path(daskrl.__file__).parent
MAX_LINES = 450


def modules() -> dict[str, Path]:
    """Every module of daskrl by dotted name (a package by its own name, for its __init__.py)."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The daskrl modules that ``name`` imports anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {m for m in found if m in known and m != name}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_cycle_between_modules():
    mods = modules()
    graph = {name: imports(name, path, set(mods)) for name, path in mods.items()}
    assert sum(len(v) for v in graph.values()) > 50, "the import graph looks empty: the scan is broken"
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


#: daskrl's layers, bottom up: a module imports only from its own package or from a lower layer (the data path reads
#: upward: env -> sampling -> learning; the driver sits on the components; features that watch a run sit on the driver)
LAYERS = [
    ("daskrl.errors", "daskrl.lazy_names"),
    ("daskrl.config", "daskrl.runtime", "daskrl.devices"),
    ("daskrl.envs", "daskrl.protocol"),
    ("daskrl.models", "daskrl.monitor"),
    ("daskrl.algo", "daskrl.setups"),
    ("daskrl.sampling",),
    ("daskrl.replay",),
    ("daskrl.learning",),
    ("daskrl.driver",),
    ("daskrl.evaluation", "daskrl.pbt", "daskrl.rerun", "daskrl.curriculum", "daskrl.league"),
    ("daskrl.api", "daskrl.testing", "daskrl.serving", "daskrl.datasets"),
    ("daskrl.sweep",),
    ("daskrl.publish",),  # result bundles: an experiment's or a sweep's, through enjoy's and export's code
    ("daskrl.cli", "daskrl.testing.faults", "daskrl"),
    ("daskrl.__main__",),  # the command's entry point: starts the worker server, then runs daskrl.cli
]


def part_of(module: str) -> tuple[int, str]:
    """(layer, package) of a daskrl module: the longest prefix LAYERS names."""
    found = [(len(p), layer, p) for layer, parts in enumerate(LAYERS) for p in parts
             if module == p or module.startswith(p + ".")]
    assert found, f"{module} is in no layer of LAYERS: give it one"
    _, layer, package = max(found)
    return layer, package


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports from a lower layer up, or sideways between two packages of one layer."""
    out = []
    for module, targets in graph.items():
        layer, package = part_of(module)
        for target in sorted(targets):
            to_layer, to_package = part_of(target)
            if to_layer > layer or (to_layer == layer and to_package != package):
                out.append(f"{module} -> {target}")
    return out


def test_no_import_runs_from_a_lower_layer_up():
    mods = modules()
    graph = {name: imports(name, path, set(mods)) for name, path in mods.items()}
    assert not upward_imports(graph)


def test_the_layer_check_finds_an_upward_import():
    assert upward_imports({"daskrl.algo.appo.trainer": {"daskrl.learning.group.learner_group"}}) == [
        "daskrl.algo.appo.trainer -> daskrl.learning.group.learner_group"]
    assert upward_imports({"daskrl.envs.vector": {"daskrl.protocol"}}) == ["daskrl.envs.vector -> daskrl.protocol"]
    assert upward_imports({"daskrl.learning.learner": {"daskrl.sampling.slots.trajectories",
                                                       "daskrl.learning.batcher"}}) == []


#: modules directly under daskrl/: a ceiling that only goes down (it was 10 with two shims, gone since)
MAX_TOP_MODULES = 8


def test_few_modules_at_the_top():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, f"{len(top)} modules directly under daskrl/ (give each concern its folder): {top}"


#: modules a folder of daskrl/ may hold (its __init__.py counted): past a dozen a newcomer meets an alphabetical list
#: instead of the architecture. The halls not given wings yet keep their counts as ceilings that only go down
MAX_MODULES_PER_FOLDER = 12
CROWDED_CEILINGS: dict[str, int] = {}


def test_no_folder_is_a_long_alphabetical_list():
    over = {}
    for folder in [PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__")]:
        name = folder.relative_to(PACKAGE).as_posix()
        count = len(list(folder.glob("*.py")))
        if folder != PACKAGE and count > CROWDED_CEILINGS.get(name, MAX_MODULES_PER_FOLDER):
            over[name] = count
    assert not over, f"folders past their module count (give them wings by concern; lower a ceiling, never raise it): {over}"
    stale = {k: v for k, v in CROWDED_CEILINGS.items() if len(list((PACKAGE / k).glob("*.py"))) < v}
    assert not stale, f"these halls got smaller: lower their ceilings to what they hold now: {stale}"


def test_no_function_is_longer_than_60_lines():
    long = [f"{name}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for name, path in modules().items() for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60]
    assert not long, f"functions over 60 lines (split them by what they do): {long}"


#: a condition on a feature (recurrent cores, several policies or tagged slots, learner groups, Dict observations,
#: self-play, --sync, sampling only, remote parameters, agents' cuts...): one of these words in an ``if``, a
#: conditional expression, a ``while`` or a comprehension's ``if``
FEATURE_WORDS = re.compile(
    r"^(recurrent|rnn\w*|seq|core|policy_id|tagged|num_policies|maps|mine|valid|owed|world|rank|learner_members"
    r"|members|publisher|is_dict|norm_keys|snapshot\w*|self_play|pbt|sampling_only|sink|remote\w*|cut|sync"
    r"|hold_slots|held|min_version|num_agents|agents\w*|policy|policies|policy_learners|policy_params|resume_state"
    r"|init_weights|elastic|evaluator|value_encoder|shared_encoder|encoder_dtype|is_image|generation)$")
#: the modules where features were threaded through the hot code (issue 29), and those carved out of them since
FEATURE_HEAVY = ["algo/appo/trainer.py", "sampling/rollout_worker.py", "learning/learner.py", "learning/batcher.py",
                 "models/actor_critic.py", "driver/fleet/fleet.py", "driver/loop/policy_book.py",
                 "algo/appo/flat_batch.py", "algo/appo/trajectory_batch.py", "learning/slot_reader.py",
                 "learning/group/group_member.py", "learning/snapshots.py", "learning/training_state.py",
                 "sampling/slots/state_carry.py", "sampling/slots/slot_owners.py", "sampling/policies/split_policies.py",
                 "sampling/slots/row_cut.py", "sampling/episode.py", "envs/groups.py", "models/inputs/observations.py"]
#: a third of what the first seven of them held at 636a34a (120): features are strategies chosen once
MAX_FEATURE_CONDITIONS = 40


def feature_conditions(source: str) -> list[str]:
    """The conditions of ``source`` that test a feature (see FEATURE_WORDS): names, attributes, and a string
    compared with ``in`` (``"rnn_states" in arrays``)."""
    def words(test: ast.AST):
        for n in ast.walk(test):
            if isinstance(n, ast.Name):
                yield n.id
            elif isinstance(n, ast.Attribute):
                yield n.attr
            elif isinstance(n, ast.Compare) and isinstance(n.left, ast.Constant) and isinstance(n.left.value, str):
                yield n.left.value

    tests = [n.test for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.If, ast.IfExp, ast.While))]
    tests += [c for n in ast.walk(ast.parse(source)) if isinstance(n, ast.comprehension) for c in n.ifs]
    return [ast.unparse(t) for t in tests if any(FEATURE_WORDS.match(w) for w in words(t))]


def test_features_are_strategies_chosen_once():
    found = {name: feature_conditions((PACKAGE / name).read_text()) for name in FEATURE_HEAVY}
    total = sum(len(v) for v in found.values())
    assert total <= MAX_FEATURE_CONDITIONS, (
        f"{total} feature conditions in the hot modules (at most {MAX_FEATURE_CONDITIONS}): where a feature changes "
        f"how a step works, choose a strategy object once instead of branching: "
        f"{ {k: v for k, v in found.items() if v} }")


def test_the_feature_count_sees_a_feature_branch():
    assert sorted(feature_conditions("if self.rnn_live is not None:\n    pass\nx = a if batch.valid is None else b\n"
                                     "y = [c for c in cols if c in policies]\nif 'rnn_states' in part:\n    pass")) == [
        "'rnn_states' in part", "batch.valid is None", "c in policies", "self.rnn_live is not None"]
    assert feature_conditions("if steps > 3:\n    pass") == []


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_only_runtime_imports_dask():
    """Everything above daskrl/runtime sees components, signals and shared arrays, never Dask itself (the test
    components and fault envs of daskrl/testing may, to behave like a deployment's)."""
    offenders = []
    for name, path in modules().items():
        if name.startswith(("daskrl.runtime", "daskrl.testing")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            offenders += [f"{name}: {n}" for n in names if n.split(".")[0] in ("dask", "distributed")]
    assert not offenders, offenders


def test_no_module_is_longer_than_450_lines():
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (each probably does more than one job): {long}"


def test_nothing_dispatches_on_a_class_name():
    """Behaviour picked by comparing class names (``s["cls"] == "RolloutWorker"``) breaks for a subclass."""
    trees = {name: ast.parse(path.read_text()) for name, path in modules().items()}
    class_names = {node.name for tree in trees.values() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    offending = []
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            for operand in [node.left, *node.comparators]:
                text = ast.unparse(operand)
                if (isinstance(operand, ast.Constant) and operand.value in class_names) or \
                        text.endswith((".__name__", ".__qualname__")) or '"cls"' in text or "'cls'" in text:
                    offending.append(f"{name}: {ast.unparse(node)}")
    assert not offending, offending


# ---- one source of defaults ----

CONFIG_DEFAULTS = {f.name: (f.default if f.default is not dataclasses.MISSING else f.default_factory())
                   for cls in SECTIONS.values() for f in dataclasses.fields(cls)}
CONFIGURED = ["daskrl.setups", "daskrl.driver", "daskrl.sampling", "daskrl.learning", "daskrl.algo", "daskrl.models",
              "daskrl.envs"]


def configured_modules():
    for name in CONFIGURED:
        module = importlib.import_module(name)
        yield module
        for info in pkgutil.walk_packages(getattr(module, "__path__", []), prefix=name + "."):
            yield importlib.import_module(info.name)


def callables_of(module):
    for _, obj in inspect.getmembers(module):
        if getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isfunction(obj):
            yield obj.__qualname__, obj
        elif inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if inspect.isfunction(member):
                    yield f"{obj.__qualname__}.{attr}", member


def test_no_component_default_differs_from_the_config():
    """A parameter named like an option (``normalize_obs``, ``clip_ratio``...) on the path from a setup to a
    component either has no default or config.py's: a fallback of its own would silently win whenever a caller
    forgets to pass the option (it did: normalize_returns, value_clip, max_grad_norm, normalize_obs)."""
    checked, differing = 0, []
    for module in configured_modules():
        for qualname, fn in callables_of(module):
            for param in inspect.signature(fn).parameters.values():
                if param.name in CONFIG_DEFAULTS and param.default is not inspect.Parameter.empty:
                    checked += 1
                    default = list(param.default) if isinstance(param.default, tuple) else param.default
                    if default is not None and default != CONFIG_DEFAULTS[param.name]:
                        differing.append(f"{module.__name__}.{qualname}({param.name}={param.default!r}): "
                                         f"config.py says {CONFIG_DEFAULTS[param.name]!r}")
    assert not differing, differing
    assert checked >= 1, "no parameter was compared: the scan is broken"


def test_the_default_check_would_catch_a_differing_default():
    def with_other_default(normalize_obs: bool = not CONFIG_DEFAULTS["normalize_obs"]) -> None: ...

    param = inspect.signature(with_other_default).parameters["normalize_obs"]
    assert param.default != CONFIG_DEFAULTS[param.name]


@pytest.mark.parametrize("setup", [setups.PolicySetup, setups.RolloutSetup, setups.InferenceSetup,
                                   setups.LearnerSetup, setups.RelaySetup, ServeSetup])
def test_setups_are_frozen_and_have_no_defaults_of_their_own(setup):
    assert setup.__dataclass_params__.frozen
    with_defaults = [f.name for f in dataclasses.fields(setup)
                     if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING]
    assert not with_defaults, f"{setup.__name__} invents defaults: {with_defaults} (role_setups fills every field)"


def test_components_are_configured_with_one_setup_and_nothing_else():
    from daskrl.learning.learner import Learner
    from daskrl.learning.replay_learner import ReplayLearner
    from daskrl.sampling.inference_worker import InferenceWorker
    from daskrl.sampling.policies.param_relay import ParamRelay
    from daskrl.sampling.rollout_worker import RolloutWorker
    from daskrl.sampling.sink import SamplingSink

    for cls in (Learner, ReplayLearner, RolloutWorker, InferenceWorker, SamplingSink, ParamRelay, PolicyServer):
        assert issubclass(cls, Component)
        params = list(inspect.signature(cls.on_configure).parameters.values())
        assert [p.name for p in params] == ["self", "setup"], f"{cls.__name__}.on_configure{params}"
        assert all(p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty for p in params)


def test_learners_are_siblings_over_one_base():
    """No learner derives from another algorithm's learner: each from LearnerBase, which holds what they share."""
    from daskrl.driver.fleet.algorithms import ALGORITHMS
    from daskrl.learning.learner_base import LearnerBase

    for algorithm in ALGORITHMS.values():
        cls = algorithm.learner
        assert cls.__bases__ == (LearnerBase,), f"{algorithm.name}'s {cls.__name__} derives from {cls.__bases__}"


#: the classes a newcomer reads first, held small: their parts are teams with a job each (the fleet's roster, learner
#: teams, samplers, replay tier and relays; the run's control, ledger, outputs and fleet care)
SMALL_CLASSES = {"driver/fleet/fleet.py": "Fleet", "driver/loop/live_run.py": "Run"}
MAX_CLASS_LINES, MAX_CLASS_ATTRIBUTES = 200, 12


def instance_attributes(cls: ast.ClassDef) -> set[str]:
    """Every ``self.name`` a method of ``cls`` assigns (plainly, annotated, or in a tuple)."""
    names = set()
    for node in ast.walk(cls):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    names.add(t.attr)
    return names


@pytest.mark.parametrize("module", sorted(SMALL_CLASSES))
def test_the_fleet_and_the_run_stay_small(module):
    [cls] = [n for n in ast.parse((PACKAGE / module).read_text()).body
             if isinstance(n, ast.ClassDef) and n.name == SMALL_CLASSES[module]]
    lines, attributes = cls.end_lineno - cls.lineno + 1, instance_attributes(cls)
    assert lines <= MAX_CLASS_LINES, f"{cls.name} has {lines} lines: give a job of it a team of its own"
    assert len(attributes) <= MAX_CLASS_ATTRIBUTES, f"{cls.name} keeps {len(attributes)}: {sorted(attributes)}"


def test_the_attribute_count_sees_every_kind_of_assignment():
    source = "class A:\n    def f(self):\n        self.a = 1\n        self.b: int = 2\n        self.c, self.d = 3, 4\n" \
             "        self.e += 1\n        other.f = 5\n"
    [cls] = ast.parse(source).body
    assert instance_attributes(cls) == {"a", "b", "c", "d", "e"}


WINGS = ("unit", "cluster", "drills")


def test_every_test_module_stands_in_a_wing():
    """The wings say what a test starts (nothing, a Dask cluster, processes), so a developer runs ``tests/unit`` between
    edits and the rest before a commit; a test module at the top of tests/ would belong to none of them."""
    tests = Path(__file__).resolve().parents[1]
    at_the_top = sorted(p.name for p in tests.glob("test_*.py"))
    outside = sorted(str(p.relative_to(tests)) for p in tests.rglob("test_*.py")
                     if p.relative_to(tests).parts[0] not in WINGS + ("algopkg", "envpkg"))
    assert not at_the_top and not outside, at_the_top + outside
    assert all((tests / wing / "__init__.py").exists() for wing in WINGS)


def test_no_test_module_imports_another():
    """Shared helpers live in tests/helpers.py (and browser.py), fixtures in conftest.py: a test module imported by
    another ties the two together, and pytest would collect its tests twice under two names if it ever re-exported
    one."""
    tests = Path(__file__).resolve().parents[1]
    offenders = []
    for path in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + ([] if node.module else [a.name for a in node.names])
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            imported = {n.rpartition(".")[2] for n in names}
            offenders += [f"{path.relative_to(tests)} imports {m}"
                          for m in sorted(imported) if m.startswith("test_") or m == "conftest"]
    assert not offenders, offenders
