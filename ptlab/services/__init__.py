"""ptlab/services."""
