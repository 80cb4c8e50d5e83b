"""ptlab/plugins."""
