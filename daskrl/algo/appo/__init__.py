"""APPO: the PPO-clipped loss with V-trace (or GAE) advantages, samples past --max-policy-lag masked out; the trajectory
batch a batcher builds, walked as shuffled steps (flat_batch) or whole sequences with truncated BPTT (recurrent); the
trainer that runs one training step."""
