"""SAC on replay minibatches: the twin critics' and the actor's losses, the temperature, and its trainer."""
