"""Evaluation games and videos of a multi-agent run while it trains (the evaluator's threads, :mod:`.evaluator`).

Every agent is played as training plays it: by the policy the run's ``--policy-mapping`` gives it, game by game
(with self-play, the frozen snapshots included), each with the newest weights its learner had when the evaluation
was due. The row gets each agent's mean return (``eval_return/<agent>``) beside the usual evaluation columns, whose
``eval_return_mean`` and ``eval_length_mean`` are per agent (its return, its own acting steps), as the run's own
``episode_return_mean`` and ``episode_length_mean`` are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from daskrl.config import Config
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.evaluation.multi_agent_play import Game, Seats, game_stats
from daskrl.evaluation.players import PolicyPlayer
from daskrl.models.actor_critic import build_model
from daskrl.sampling.policies.policy_map import PolicyMap, mapping_of, snapshot_owners


def agent_columns(agent_ids: Sequence[str]) -> tuple[str, ...]:
    """The row's per-agent evaluation columns (CSV names; TensorBoard's tags are ``eval/return/<agent>``)."""
    return tuple(f"eval_return/{agent}" for agent in agent_ids)


def acting_weights(learners: Sequence[Any], timeout: float = 120) -> list[dict]:
    """The newest weights of each acting policy: every trained policy's (its learner's ``checkpoint_state``), then
    the self-play snapshots' (each held by its policy's learner: policy 0's, or every league member's), learner by
    learner as the acting policies number them."""
    states = [learner.call("checkpoint_state", timeout=timeout) for learner in learners]
    snapshots = [w for state in states for w in (state.get("self_play_snapshots") or {}).get("weights", [])]
    return [state["model"] for state in states] + snapshots


class RunPolicies:
    """A multi-agent run's acting policies as players: networks built once (each from its own spaces), loaded with
    new weights at each evaluation, seated as the run's mapping seats them."""

    def __init__(self, config: Config, spaces: EnvSpaces, deterministic: bool) -> None:
        from daskrl.driver.fleet.role_setups import acting_spaces

        self.config, self.spaces = config, spaces
        n = config.policies.num_policies
        self.players = [PolicyPlayer(f"policy {k}" if k < n else f"snapshot {k - n}",
                                     build_model(own, config.model, config.run.seed), spaces, deterministic)
                        for k, own in enumerate(acting_spaces(config, spaces))]

    def load(self, weights: Sequence[dict]) -> None:
        for player, held in zip(self.players, weights, strict=True):
            player.model.load_state_dict({k: torch.as_tensor(v).cpu() for k, v in held.items()})
            player.model.eval()

    def seats(self) -> Callable[[int], Seats]:
        """Each game's seats, from a fresh mapping: every evaluation plays the same seatings."""
        p = self.config.policies
        pmap = PolicyMap(mapping_of(p), p.num_policies, self.spaces.agent_ids, [0], 1, len(snapshot_owners(p)))

        def seats(game: int) -> Seats:
            if game:
                pmap.episodes_began([0])
            return [self.players[int(k)] for k in pmap.column_policy], None

        return seats


def eval_result(games: Sequence[Game], agent_ids: Sequence[str], env_steps: int) -> dict[str, Any]:
    """The row's evaluation columns for these games (taken at ``env_steps``)."""
    stats = game_stats(games, agent_ids)
    per_agent = {column: stats["agents"][agent]["return_mean"]
                 for column, agent in zip(agent_columns(agent_ids), agent_ids, strict=True)}
    return {"eval_return_mean": stats["return_mean"], "eval_return_std": stats["return_std"],
            "eval_length_mean": stats["agent_length_mean"], "eval_episodes": stats["episodes"],
            "eval_env_steps": env_steps, **per_agent}
