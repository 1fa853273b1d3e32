"""Real components and misbehaving envs for daskrl's tests, benchmarks and fault drills (importable on every worker).

- :mod:`daskrl.testing.components`: runtime test components (emitters, recorders, parameter writers, benchmarks);
- :mod:`daskrl.testing.sampling`: a slot consumer that keeps what it receives, and a recognizable parameter source;
- :mod:`daskrl.testing.faults`: gymnasium envs that raise, hang or return NaN on a schedule.
- :mod:`daskrl.testing.environments.envs`: small envs whose right answer is known in closed form (single-agent,
  parallel multi-agent, turn-based games; one module per family of ``environments/``, indexed there).

Nothing here is a mock: each is a component or env that runs like the real ones, only built to make its effects
checkable.
"""
