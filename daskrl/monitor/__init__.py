"""Statistics and logs of a run: episode statistics, progress lines, the run's state and row; its CSV, TensorBoard,
Weights & Biases and video outputs (``outputs/``), its figures and HTML report (``figures/``), and the dashboard page
(``dashboard/``)."""
