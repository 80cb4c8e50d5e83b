"""Which cells of a spec's matrix a run runs: ``-t``, ``-c``, ``-k`` and ``--shard``.

A large matrix (experiments/full.toml has 966 cells) is rarely run whole while a
study takes shape: a researcher reruns the rows they changed, the columns of one
censor, or the cells whose name matches an expression, as ``pytest -k`` does. A
batch system (a Slurm job array, a Kubernetes indexed Job) runs shard K of N.
The selection is recorded in the results, so a partial run never passes for a
whole one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ptcommon.suggest import did_you_mean

from ..common.specfile import SpecError

Cell = tuple[str, str]  # (transport row, censor column)

_TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")
_OPERATORS = ("and", "or", "not")


Match = Callable[[list[str]], bool]


def _either(a: Match, b: Match) -> Match:
    return lambda names: a(names) or b(names)


def _both(a: Match, b: Match) -> Match:
    return lambda names: a(names) and b(names)


class KeywordError(SpecError):
    """A -k expression that does not parse; the message says where."""


class Keyword:
    """A ``-k`` expression, with pytest's grammar: names joined by ``and``, ``or``,
    ``not`` and parentheses. A name matches a cell when it is a substring, in any
    case, of the cell's transport, its censor column, the column's profile, or
    ``transport-censor``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._tokens = [t for t in _TOKEN.findall(text) if t]
        self._pos = 0
        if not self._tokens:
            raise KeywordError(f"-k: an empty expression ({text!r})")
        self._match = self._or()
        if self._pos != len(self._tokens):
            raise KeywordError(f"-k {text!r}: unexpected {self._tokens[self._pos]!r}")

    def matches(self, names: Iterable[str]) -> bool:
        return self._match([n.lower() for n in names])

    def _peek(self) -> str | None:
        return self._tokens[self._pos] if self._pos < len(self._tokens) else None

    def _take(self) -> str:
        token = self._peek()
        if token is None:
            raise KeywordError(f"-k {self.text!r}: the expression ends too soon")
        self._pos += 1
        return token

    def _or(self) -> Match:
        left = self._and()
        while self._peek() == "or":
            self._take()
            left = _either(left, self._and())
        return left

    def _and(self) -> Match:
        left = self._not()
        while self._peek() == "and":
            self._take()
            left = _both(left, self._not())
        return left

    def _not(self) -> Match:
        if self._peek() == "not":
            self._take()
            inner = self._not()
            return lambda n: not inner(n)
        return self._atom()

    def _atom(self) -> Match:
        token = self._take()
        if token == "(":
            inner = self._or()
            if self._take() != ")":
                raise KeywordError(f"-k {self.text!r}: a '(' is not closed")
            return inner
        if token in (")", *_OPERATORS):
            raise KeywordError(f"-k {self.text!r}: {token!r} where a name belongs")
        word = token.lower()
        return lambda names: any(word in n for n in names)


@dataclass(frozen=True)
class Selection:
    """Rows (``-t``), columns (``-c``), a keyword expression (``-k``) and a shard
    (``--shard K/N``, 1-based); empty means all."""

    transports: tuple[str, ...] = ()
    censors: tuple[str, ...] = ()
    keyword: str | None = None
    shard: tuple[int, int] | None = None

    @property
    def is_all(self) -> bool:
        return not (self.transports or self.censors or self.keyword or self.shard)

    def check(self, transports: Sequence[str], censors: Sequence[str]) -> None:
        """Every named row and column exists in the spec; the shard is in range."""
        for kind, names, known in (("transport", self.transports, transports),
                                   ("censor column", self.censors, censors)):
            for name in names:
                if name not in known:
                    raise SpecError(f"-{kind[0]} {name}: no {kind} of that name in the spec"
                                    f"{did_you_mean(name, list(known))} "
                                    f"(it has: {', '.join(known)})")
        if self.keyword is not None:
            Keyword(self.keyword)
        if self.shard is not None:
            k, n = self.shard
            if not 1 <= k <= n:
                raise SpecError(f"--shard {k}/{n}: K must be between 1 and N")

    def cells(self, transports: Sequence[str], censors: Sequence[str],
              profiles: dict[str, str] | None = None) -> list[Cell]:
        """The selected cells in the run's order: row by row, each row's columns as
        the spec lists them. ``profiles`` maps a column to its profile's name, which
        ``-k`` matches too."""
        self.check(transports, censors)
        keyword = Keyword(self.keyword) if self.keyword else None
        profiles = profiles or {}
        out = []
        for t in transports:
            if self.transports and t not in self.transports:
                continue
            for c in censors:
                if self.censors and c not in self.censors:
                    continue
                if keyword and not keyword.matches(
                        (t, c, profiles.get(c, c), f"{t}-{c}")):
                    continue
                out.append((t, c))
        if self.shard is not None:
            out = shard_of(out, *self.shard)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"transports": list(self.transports), "censors": list(self.censors),
                "keyword": self.keyword,
                "shard": None if self.shard is None else f"{self.shard[0]}/{self.shard[1]}"}


def shard_of(cells: Sequence[Cell], k: int, n: int) -> list[Cell]:
    """Shard K of N (1-based) of the cells: contiguous, sizes differing by at most
    one, so a row's cells mostly stay together (each shard measures its own
    baseline for every row it touches)."""
    size, extra = divmod(len(cells), n)
    start = (k - 1) * size + min(k - 1, extra)
    return list(cells[start:start + size + (1 if k <= extra else 0)])


def parse_shard(text: str) -> tuple[int, int]:
    """``K/N`` as (K, N); a SpecError for anything else."""
    m = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not m or int(m.group(2)) < 1:
        raise SpecError(f"--shard {text!r}: expected K/N, e.g. 2/8")
    return int(m.group(1)), int(m.group(2))
