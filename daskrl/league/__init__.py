"""Leagues (``--league``): members in AlphaStar's roles (:mod:`.members`), who beat whom and their Elo ratings
(:mod:`.payoff`), whom each member plays (:mod:`.pfsp`), and the runner's side that ties them to a run
(:mod:`.observer`). docs/multi.md has the recipe and its measured results."""
