"""Policy mappings (``--policy-mapping daskrl.testing.mappings:<name>``) for tests: importable on every worker."""

from __future__ import annotations


def by_role(agent_id: str, episode_index: int) -> int:
    """MPE's simple_adversary: the adversary is policy 0, the good agents policy 1."""
    return 0 if agent_id.startswith("adversary") else 1


def swap_every_episode(agent_id: str, episode_index: int) -> int:
    """by_role, with the roles' policies swapped in odd episodes (one policy meets both kinds of agent)."""
    return by_role(agent_id, episode_index) ^ (episode_index % 2)

