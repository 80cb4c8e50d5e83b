"""The learning censor's lab side: datasets from the lab, training and evaluation.

``ptlab dataset`` (:mod:`.dataset`) runs transports and benign traffic in the
lab under several link settings and writes labelled per-flow features with
the pcaps they came from; ``ptlab evaluate`` (:mod:`.evaluate`) trains and
tests classifiers on them (:mod:`.train`) and reports TPR/FPR with intervals,
ROC curves, portability across settings and the base-rate arithmetic
(:mod:`.metrics`, :mod:`.report`). The censor side (features, models, the
live decision) is ``censor_sim.detectors.ml``.
"""
