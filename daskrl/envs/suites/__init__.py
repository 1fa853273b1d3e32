"""The env families daskrl registers: Atari 2600 games (gymnasium's emulator or envpool's), VizDoom scenarios, and
two small demo envs.
"""
