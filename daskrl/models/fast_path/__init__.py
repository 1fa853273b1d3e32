"""The inline fast path: an MLP actor-critic's act in plain numpy, from its published weights and the plan that says
which keys make each layer.
"""
