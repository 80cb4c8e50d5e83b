"""``ptlab merge DIR… --out OUT``: the shards of one run, joined into one results
directory as a single run would have written it.

A batch system runs ``ptlab run --shard K/N`` as N independent jobs (a Slurm job
array, a Kubernetes indexed Job); each writes its own results. Shards are only
parts of one run when they ran the same spec with the same settings and the same
code, so anything else is refused in one line. A cell that two shards both hold
is refused too: it would be counted twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..common.results import Results, load_results, now_iso, write_results
from ..common.specfile import SpecError


def _same(what: str, values: list[object], dirs: Sequence[Path]) -> str | None:
    first = values[0]
    for value, d in zip(values, dirs, strict=True):
        if value != first:
            return f"{d} ran with other {what} than {dirs[0]}"
    return None


def merge(dirs: Sequence[Path], force: bool = False) -> Results:
    """The shards' results as one run; SpecError when they are not parts of one."""
    if len(dirs) < 2:
        raise SpecError("merge needs at least two results directories")
    runs = []
    for d in dirs:
        try:
            runs.append(load_results(d))
        except FileNotFoundError:
            raise SpecError(f"{d}: no results.json there") from None
        except ValueError as exc:
            raise SpecError(f"{d}: {exc}") from None
    problems = [p for p in (
        _same("a spec", [r.spec for r in runs], dirs),
        _same("settings", [r.settings for r in runs], dirs),
        _same("code (git SHA)", [r.provenance.get("git_sha") for r in runs], dirs),
    ) if p]
    if problems and not force:
        raise SpecError(f"not shards of one run: {problems[0]} (--force merges anyway)")
    seen: dict[tuple[str, str], Path] = {}
    rows = []
    for run, d in zip(runs, dirs, strict=True):
        for row in run.rows:
            key = (row.transport, row.censor)
            if key in seen:
                raise SpecError(f"{row.cell} is in both {seen[key]} and {d}: it would be "
                                "counted twice")
            seen[key] = d
            rows.append(row)
    first = runs[0]
    # The spec's own order: row by row, each row's columns as listed.
    transports = list(first.spec.get("transports", {}))
    censors = list(first.spec.get("censors", {}))
    rows.sort(key=lambda r: (transports.index(r.transport) if r.transport in transports
                             else len(transports),
                             censors.index(r.censor) if r.censor in censors else len(censors)))
    provenance = dict(first.provenance)
    provenance["merged"] = [{"directory": str(d), "started": r.started,
                             "selection": r.selection, "hostname":
                             r.provenance.get("hostname")} for r, d in zip(runs, dirs,
                                                                             strict=True)]
    return Results(
        started=min(r.started for r in runs), finished=max(r.finished for r in runs),
        spec_path=first.spec_path, spec=first.spec, settings=first.settings,
        setting_origins=first.setting_origins,
        selection={"merged_from": [r.selection for r in runs]},
        provenance=provenance, rows=rows)


def merge_into(dirs: Sequence[Path], out: Path, force: bool = False) -> Results:
    """Merge and write results.json and results.csv into `out` (the report follows)."""
    results = merge(dirs, force)
    results.provenance["merged_at"] = now_iso()
    write_results(results, out)
    return results
