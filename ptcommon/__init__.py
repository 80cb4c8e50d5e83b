"""The leaf every layer may import: formats shared across process and layer lines.

It imports only the standard library, so ``netns``, ``censor_sim``, ``transports``,
``broker`` and ``ptlab`` can all use it without breaking the layer rules
(docs/architecture.md §2.2). What belongs here is a format two layers must agree on
byte for byte: the event lines every lab process writes (:mod:`ptcommon.events`).
"""
