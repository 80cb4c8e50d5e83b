"""censor_sim/profiles."""
