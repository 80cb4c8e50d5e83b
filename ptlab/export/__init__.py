"""Exports of an experiment to other engines (ARCHITECTURE.md §6): Shadow, for scale."""
