"""DQN on replay minibatches: the n-step double-Q loss and its trainer (online and target networks, dueling heads)."""
