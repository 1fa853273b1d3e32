"""Real gymnasium and PettingZoo-style envs whose effects are checkable: envs whose right answer is known in closed
form (single-agent, parallel multi-agent, turn-based games; indexed in envs) and an env that runs a process of
its own, like a VizDoom game.
"""
