"""Learning-censor models shipped with ptlab (JSON, see censor_sim.detectors.ml.model)."""
