"""CQL: conservative Q-learning for offline reinforcement learning (Kumar, Zhou, Tucker and Levine 2020)."""
