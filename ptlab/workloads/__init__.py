"""ptlab/workloads."""
