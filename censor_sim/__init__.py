"""censor_sim."""
