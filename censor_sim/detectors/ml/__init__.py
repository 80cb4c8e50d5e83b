"""Learning censors: flow classifiers in the style of Wang et al., CCS 2015.

Wang, Dyer, Akella, Ristenpart and Shrimpton ("Seeing through Network-Protocol
Obfuscation", docs/censors/ml.md §1) showed that a censor needs no per-transport
signature: an entropy-distribution test with a length rule on the first
client message separates obfs3/obfs4 from ordinary traffic, and decision
trees over simple features of a flow's first 30 packets catch meek.

One module per layer, each pure and clock-free:

* :mod:`.flowlog` - the first packets of one flow as the censor saw them
  (direction, time, length, bytes), built the same way from NFQUEUE and from
  a pcap, so training data and live decisions see identical inputs;
* :mod:`.entropy_test` - the entropy-distribution and first-message length test;
* :mod:`.features` - the named, versioned feature vector over the first N packets;
* :mod:`.trees` - decision trees and gradient-boosted ensembles as plain data,
  with their own evaluator (the censor needs no scikit-learn, and no pickle);
* :mod:`.model` - a saved model: kind, feature schema, threshold, provenance.

Training and evaluation (which need scikit-learn) live in ``ptlab.ml``.
"""
