"""obfs4: a wire-compatible implementation of obfs4proxy 0.0.14, one module per layer."""
