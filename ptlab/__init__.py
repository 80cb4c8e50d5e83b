"""ptlab."""
