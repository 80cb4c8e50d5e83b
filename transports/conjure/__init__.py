"""Conjure: registration, phantom addresses from a shared seed, and a station that
answers for unused addresses (meek_conjure.md §2)."""
