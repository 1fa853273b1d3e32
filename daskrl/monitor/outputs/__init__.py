"""Where a run's numbers and videos go: the CSV, TensorBoard event files (and the writer that makes them), Weights &
Biases, and mp4 videos of the policy.
"""
