"""Conjure: registration, phantom addresses from a shared seed, and a station that
answers for unused addresses (docs/transports/conjure.md §1)."""
