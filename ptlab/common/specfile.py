"""Reading and checking the project's TOML files: experiment specs, dataset
specs and scale specs share their errors and their checks.

Every error names the file and the key path (``workloads.bulk.szie: unknown
key``), so a typo never silently runs a default.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from ptcommon.suggest import did_you_mean


class SpecError(ValueError):
    """A bad spec; the message names the file and the key path."""


def read_toml(path: Path) -> dict[str, Any]:
    """A spec file's TOML, or a SpecError naming the file."""
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(f"{path}: no such spec file") from None
    except IsADirectoryError:
        raise SpecError(f"{path}: a directory, not a spec file (specs are TOML files, "
                        "e.g. experiments/default.toml)") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text (byte {exc.start}): a spec is a TOML "
                        "file") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read it: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{Path(path).name}: not valid TOML: {exc}") from None


class Checker:
    """Key and value checks for the other spec formats (datasets, scale specs);
    every error names the file (`where`) and the key path."""

    def __init__(self, where: str) -> None:
        self.where = where

    def table(self, t: Any, path: str, allowed: set[str]) -> dict[str, Any]:
        if not isinstance(t, dict):
            raise SpecError(f"{self.where}: {path}: expected a table")
        for k in t:
            if k not in allowed:
                raise SpecError(f"{self.where}: {path}.{k}: unknown key{did_you_mean(k, allowed)} "
                                f"(allowed: {', '.join(sorted(allowed))})")
        return t

    def number(self, t: dict[str, Any], key: str, path: str, default: float, lo: float,
               hi: float, integer: bool = False) -> Any:
        v = t.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int if integer else (int, float)):
            raise SpecError(f"{self.where}: {path}.{key}: expected "
                            f"{'an integer' if integer else 'a number'}")
        if not lo <= v <= hi:
            raise SpecError(f"{self.where}: {path}.{key}: must be in [{lo}, {hi}]")
        return v


def flatten_keys(d: Any, prefix: str = "") -> dict[str, Any]:
    """A nested table as dotted key paths -> values, the way a spec writes overrides
    (``policy.rules``, ``actions.residual.seconds``)."""
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(flatten_keys(v, f"{prefix}.{k}" if prefix else str(k)))
    return out
