"""Curricula (``--curriculum``, ``--curriculum-tasks``): the rule that says when a task is learned (:mod:`.progress`)
and the runner's side that moves every rollout worker's envs on to the next task (:mod:`.observer`). The envs that
switch tasks are :mod:`daskrl.envs.curriculum_env`'s."""
