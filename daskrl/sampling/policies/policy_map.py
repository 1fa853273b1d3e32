"""Which policy acts for each env column of a rollout-worker split (``--policy-mapping``).

A column is one agent of one env (a single-agent env has one column per env). Its policy is chosen when its env
starts an episode and kept for the whole episode, so every episode is played, and credited, by one policy per
agent. The mapping is asked ``(agent_id, episode_index)``; episode indices are unique in the run: the episodes of
the env with global index ``g`` are numbered ``g, g + E, g + 2E, ...`` where ``E`` is the run's env count, so
consecutive numbers are episodes played at the same time.

Mappings: ``shared`` (policy 0 for every agent), ``round_robin`` (single-agent envs: env ``g`` is played by
policy ``g % N`` throughout, so each trajectory slot's columns keep their policy; multi-agent envs: agent at
position ``a`` of env ``g`` in that env's ``k``-th episode is played by policy ``(g + k + a) % N``, so with two
players and two policies the seats alternate between episodes), ``module:function`` (the user's function), and
``auto`` (self_play with self-play snapshots, else round_robin with several policies, else shared), and
``self_play`` (``--self-play-snapshots K``: in env ``g``'s ``k``-th episode the agent at position ``(g + k) % A``
is played by policy ``g % N`` and every other agent by a frozen snapshot of policy 0, acting as policy
``N + (episode_index % K)``, so the learner's seat alternates and the snapshots take turns as opponents), and
``league`` (``--league``: seats as with self_play, and the opponent drawn at random by the weights the league's
driver side sets for the seated policy, over every acting policy: trained members, each member's snapshots and, in a
league of runs, the other member runs' policies and snapshots: :func:`peer_slots`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

import numpy as np

from daskrl.config.options import PolicyConfig
from daskrl.errors import ConfigError

Mapping = Callable[[str, int], int]

#: the policy id of a column whose agent does not act at a step (it finished before its env did)
NOBODY = -1


def mapping_of(policies: PolicyConfig) -> str:
    """The mapping a run's rollout workers play by: ``league`` with --league, else --policy-mapping."""
    return "league" if policies.league else policies.policy_mapping


def snapshot_owners(policies: PolicyConfig) -> tuple[int, ...]:
    """The trained policy each self-play snapshot (acting policies ``num_policies`` on) is a past version of: policy
    0 for every one, or with a league every member's ``--self-play-snapshots``, member by member."""
    owners = range(policies.num_policies) if policies.league else (0,)
    return tuple(k for k in owners for _ in range(policies.self_play_snapshots))


def peer_slots(policies: PolicyConfig) -> int:
    """A member run of a league of runs (--league-peers): the acting policies after its own snapshots that seat the
    other members, each peer's current policy and then its ``--self-play-snapshots`` snapshots, peer by peer."""
    return len(policies.league_peers) * (1 + policies.self_play_snapshots) if policies.league else 0


def opponent_slots(policies: PolicyConfig) -> int:
    """The acting policies after the trained ones: the self-play snapshots, then a league of runs' peer slots."""
    return len(snapshot_owners(policies)) + peer_slots(policies)


def slots_tagged(num_policies: int, num_agents: int) -> bool:
    """Whether slots record who acted per column and step: several policies, or agents that may sit steps out."""
    return num_policies > 1 or num_agents > 1


def resolve_mapping(spec: str, num_policies: int, snapshots: int = 0) -> tuple[str, Mapping | None]:
    """``(kind, function)``: kind is 'shared', 'round_robin', 'self_play' or 'custom' (with the imported
    function)."""
    if spec == "auto":
        spec = "self_play" if snapshots else "round_robin" if num_policies > 1 else "shared"
    if spec == "self_play" and not snapshots:
        raise ConfigError(["--policy-mapping self_play needs opponents: --self-play-snapshots 1 or more"])
    if spec in ("shared", "round_robin", "self_play", "league"):
        return spec, None
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError([f"--policy-mapping must be shared, round_robin, auto or module:function, got {spec!r}"])
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError([f"--policy-mapping {spec!r} cannot be imported ({type(exc).__name__}: {exc}); name a "
                           "function as module:function, in a module the workers can import too"]) from exc
    if not callable(fn):
        raise ConfigError([f"--policy-mapping {spec!r} is not a function"])
    return "custom", fn


def check_mapping(spec: str, num_policies: int, agent_ids: Sequence[str], snapshots: int = 0) -> None:
    """Call the mapping once per agent before any process starts: a bad answer is one line now, not a dead worker
    later. Self-play needs an env with two or more agents."""
    kind, fn = resolve_mapping(spec, num_policies, snapshots)
    if kind == "self_play" and len(agent_ids) < 2:
        raise ConfigError([f"--self-play-snapshots {snapshots} needs an env with two or more agents (a PettingZoo "
                           "env; --frozen-opponent too); this one has one"])
    if kind == "league" and len(agent_ids) != 2:
        raise ConfigError([f"--league needs a two-player game (a PettingZoo env of two agents, such as "
                           f"pettingzoo.classic.tictactoe.tictactoe:env); this one has {len(agent_ids)} agent(s)"])
    if fn is None:
        return
    for agent in agent_ids:
        _checked(fn, spec, num_policies + snapshots, agent, 0)


def _checked(fn: Mapping, spec: str, num_policies: int, agent: str, episode: int) -> int:
    try:
        policy = fn(agent, episode)
    except Exception as exc:
        raise ConfigError([f"--policy-mapping {spec!r} raised for agent {agent!r}, episode {episode}: "
                           f"{type(exc).__name__}: {exc}"]) from exc
    if isinstance(policy, bool) or not isinstance(policy, (int, np.integer)) or not 0 <= policy < num_policies:
        raise ConfigError([f"--policy-mapping {spec!r} returned {policy!r} for agent {agent!r}, episode {episode}; "
                           f"it must return a policy index in 0..{num_policies - 1} (--num-policies, plus "
                           "--self-play-snapshots: the snapshots act as the policies after the trained ones)"])
    return int(policy)


class PolicyMap:
    """The policy of each column of one split, remapped when an env starts an episode (see the module docstring)."""

    def __init__(self, spec: str, num_policies: int, agent_ids: Sequence[str], env_indices: Sequence[int],
                 run_envs: int, snapshots: int = 0, opponent_weights: Sequence[Sequence[float]] | None = None) -> None:
        """``agent_ids``: one per column (env-major: column ``c`` is agent ``c % A`` of env ``c // A``);
        ``env_indices``: the run-wide index of each env of the split; ``run_envs``: the run's env count;
        ``snapshots``: self-play opponents, acting as policies ``num_policies ..``; ``opponent_weights``: a
        league's draw (:meth:`draw_opponents_by`)."""
        self.spec, self.num_policies, self.snapshots = spec, num_policies, snapshots
        self.kind, self.fn = resolve_mapping(spec, num_policies, snapshots)
        self.opponents = opponents_for(self.kind, num_policies, snapshots, env_indices, opponent_weights)
        self.agent_ids = list(agent_ids)
        self.agents_per_env = len(self.agent_ids) // len(env_indices)
        self.env_indices = list(env_indices)
        self.run_envs = max(run_envs, 1)
        self.episodes_started = [0] * len(self.env_indices)
        self.column_policy = np.zeros(len(self.agent_ids), np.int8)
        self._groups: list[tuple[int, np.ndarray | slice]] | None = None  # columns_by_policy(column_policy)
        for env in range(len(self.env_indices)):
            self._assign(env)

    def episode_index(self, env: int) -> int:
        """The run-wide index of the episode env ``env`` (of this split) plays now."""
        return self.env_indices[env] + (self.episodes_started[env] - 1) * self.run_envs

    def episodes_began(self, envs: Sequence[int] | np.ndarray) -> None:
        """These envs started a new episode: choose their agents' policies for it."""
        for env in envs:
            self._assign(int(env))

    def _assign(self, env: int) -> None:
        episode = self.env_indices[env] + self.episodes_started[env] * self.run_envs
        self.episodes_started[env] += 1
        if self.kind == "shared":
            return  # every column stays policy 0
        first = env * self.agents_per_env
        for position in range(self.agents_per_env):
            column = first + position
            if self.kind == "round_robin":
                turn = 0 if self.agents_per_env == 1 else self.episodes_started[env] - 1 + position
                policy = (self.env_indices[env] + turn) % self.num_policies
            elif self.kind in ("self_play", "league"):
                seat = (self.env_indices[env] + self.episodes_started[env] - 1) % self.agents_per_env
                member = self.env_indices[env] % self.num_policies
                policy = member if position == seat else self.opponents.opponent_of(member, episode)
            else:
                policy = _checked(self.fn, self.spec, self.num_policies + self.snapshots, self.agent_ids[column],
                                  episode)
            if self.column_policy[column] != policy:
                self.column_policy[column] = policy
                self._groups = None

    def draw_opponents_by(self, weights: Sequence[Sequence[float]] | None) -> None:
        """A league's draw from now on (:meth:`LeagueDraw.draw_by`); only a league's mapping draws."""
        if not isinstance(self.opponents, LeagueDraw):
            raise TypeError(f"the {self.kind!r} policy mapping draws no opponents: only --league's does")
        self.opponents.draw_by(weights)

    def acting(self, active: np.ndarray | None) -> np.ndarray:
        """The policy id of each column at this step: its policy, or :data:`NOBODY` where it does not act."""
        if active is None:
            return self.column_policy
        return np.where(active, self.column_policy, NOBODY).astype(np.int8)

    def groups(self, active: np.ndarray | None) -> list[tuple[int, np.ndarray | slice]]:
        """:func:`columns_by_policy` of this step's ids. With every agent acting (single-agent envs) they change only
        when an episode start changes a column's policy, so they are worked out then, not at every step."""
        if active is not None:
            return columns_by_policy(self.acting(active))
        if self._groups is None:
            self._groups = columns_by_policy(self.column_policy)
        return self._groups


def opponents_for(kind: str, num_policies: int, snapshots: int, env_indices: Sequence[int],
                  weights: Sequence[Sequence[float]] | None) -> SnapshotTurns | LeagueDraw | None:
    """Who sits beside a trained policy, for the mappings that seat one: self-play's snapshots in turn, or a
    league's draw; None for the others (every seat is a policy of its own)."""
    if kind == "self_play":
        return SnapshotTurns(num_policies, snapshots)
    if kind == "league":
        return LeagueDraw(num_policies, snapshots, env_indices, weights)
    return None


class SnapshotTurns:
    """Self-play's opponents: the snapshots take turns, ``num_policies + episode_index % snapshots``."""

    def __init__(self, num_policies: int, snapshots: int) -> None:
        self.num_policies, self.snapshots = num_policies, snapshots

    def opponent_of(self, member: int, episode: int) -> int:
        return self.num_policies + episode % self.snapshots


class LeagueDraw:
    """A league's opponents, drawn at random for each episode by the weights the league's driver side sets for the
    seated member (each split its own random stream, seeded by its envs' indices)."""

    def __init__(self, num_policies: int, snapshots: int, env_indices: Sequence[int],
                 weights: Sequence[Sequence[float]] | None) -> None:
        self.num_policies, self.acting = num_policies, num_policies + snapshots
        self.rng = np.random.default_rng(list(env_indices))
        self.cumulative = self._cumulative(weights)

    def draw_by(self, weights: Sequence[Sequence[float]] | None) -> None:
        """``weights[k][a]``: how often acting policy ``a`` sits beside trained policy ``k`` (normalized here);
        None: every acting policy but ``k`` itself alike."""
        self.cumulative = self._cumulative(weights)

    def opponent_of(self, member: int, episode: int) -> int:
        row = self.cumulative[member]
        drawn = int(np.searchsorted(row, self.rng.random() * row[-1], side="right"))
        return min(drawn, len(row) - 1)  # a draw of exactly the total lands past the end

    def _cumulative(self, weights: Sequence[Sequence[float]] | None) -> np.ndarray:
        table = np.ones((self.num_policies, self.acting)) - np.eye(self.num_policies, self.acting) if weights is None \
            else np.asarray(weights, np.float64).reshape(self.num_policies, self.acting)
        return np.cumsum(table, axis=1)


def columns_by_policy(ids: np.ndarray) -> list[tuple[int, np.ndarray | slice]]:
    """``[(policy, columns)]`` for the policies present in ``ids`` (one step's policy ids); a policy's columns are a
    slice when they are one contiguous run (a view instead of a copy on the hot path)."""
    out: list[tuple[int, np.ndarray | slice]] = []
    for policy in np.unique(ids):
        if policy < 0:
            continue
        columns = np.flatnonzero(ids == policy)
        if columns[-1] - columns[0] + 1 == len(columns):
            out.append((int(policy), slice(int(columns[0]), int(columns[-1]) + 1)))
        else:
            out.append((int(policy), columns))
    return out
