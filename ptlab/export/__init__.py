"""Exports of an experiment to other engines (docs/architecture.md §6.3): Shadow, for scale."""
