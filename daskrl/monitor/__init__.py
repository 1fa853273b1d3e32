"""Statistics and logs of a run: episode statistics, progress lines, CSV and TensorBoard files."""
