"""ScrambleSuit: obfs4's predecessor (UniformDH, session tickets, polymorphic shaping),
the client side of which obfs4proxy 0.0.14 still ships (docs/transports/scramblesuit.md §1)."""
