"""A user's algorithm in a package of its own: A2C (synchronous advantage actor-critic, Mnih et al. 2016), registered
with daskrl by importing this package. Nothing in daskrl names it: its trainer is ``trainer.py`` here, it trains on
fresh slots with daskrl's on-policy learner, and rollout workers sample its policy as they sample APPO's."""

from daskrl import Algorithm, register_algorithm
from daskrl.driver.fleet.algorithms import samples_its_policy

A2C = Algorithm("a2c", samples_its_policy, "fresh slots",
                "daskrl_test_a2c.trainer:A2CTrainer", ("discrete", "box"))
register_algorithm(A2C)
