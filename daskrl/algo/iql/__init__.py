"""IQL: offline reinforcement learning with implicit Q-learning (Kostrikov, Nair and Levine 2021)."""
