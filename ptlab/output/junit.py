"""A run as JUnit XML (``ptlab run --junit FILE``): one test case per cell.

Every CI system renders JUnit XML (Jenkins' xUnit plugin, GitLab's
``artifacts:reports:junit``, GitHub's test reporters), so a pipeline shows the
matrix cell by cell with no code of ours. The dialect is the one Jenkins' xUnit
plugin defines in its junit-10 schema, which the others read too:

- a cell whose status is ERROR is an ``<error>`` (the lab could not measure it);
- a cell whose expectation failed, or whose bulk check caught a corrupted byte,
  is a ``<failure>``;
- a skipped row's cell is ``<skipped>``;
- every case carries the cell's one-line summary in ``<system-out>``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from ..common.results import Results, Row
from . import cellfmt

#: The test case's class name: the suite, the transport (CI systems group by it).
CLASSNAME = "ptlab.{spec}.{transport}"


def _seconds(value: float | None) -> str:
    return f"{value or 0.0:.3f}"


def _case(row: Row, spec_name: str, corrupted: set[str]) -> tuple[ET.Element, str]:
    """A cell's test case, and its outcome: "error", "failure", "skipped" or "passed"."""
    case = ET.Element("testcase", {
        "name": f"{row.transport} × {row.censor}",
        "classname": CLASSNAME.format(spec=spec_name, transport=row.transport),
        "time": _seconds(row.cell_seconds)})
    outcome = "passed"
    if row.status == "ERROR":
        outcome = "error"
        ET.SubElement(case, "error", {"type": "lab", "message": row.error or "ERROR"}).text = (
            f"{row.cell}: the lab could not measure this cell: {row.error or 'no reason'}")
    elif row.status == "skipped":
        outcome = "skipped"
        ET.SubElement(case, "skipped", {"message": row.error or "skipped"})
    elif row.cell in corrupted:
        outcome = "failure"
        ET.SubElement(case, "failure", {"type": "corrupted",
                                        "message": "a bulk download's bytes were corrupted"}
                      ).text = row.error or ""
    elif row.expectation_met is False:
        outcome = "failure"
        message = f"expected {row.expectation}, got {row.status}"
        ET.SubElement(case, "failure", {"type": "expectation", "message": message}).text = (
            f"{row.cell}: {message}" + (f" ({row.error})" if row.error else ""))
    ET.SubElement(case, "system-out").text = cellfmt.summary(row)
    return case, outcome


def junit_xml(results: Results, spec_name: str,
              corrupted_cells: Sequence[str] = ()) -> str:
    """The run as a JUnit XML document: one suite (the spec), one case per cell.
    ``corrupted_cells`` are the cells (``transport × censor``) whose bulk check failed."""
    corrupted = set(corrupted_cells)
    suite = ET.Element("testsuite", {"name": spec_name, "timestamp": results.started})
    counts = {"error": 0, "failure": 0, "skipped": 0, "passed": 0}
    for row in results.rows:
        case, outcome = _case(row, spec_name, corrupted)
        counts[outcome] += 1
        suite.append(case)
    total = sum(counts.values())
    seconds = sum(r.cell_seconds or 0.0 for r in results.rows)
    suite.attrib.update(tests=str(total), failures=str(counts["failure"]),
                        errors=str(counts["error"]), skipped=str(counts["skipped"]),
                        time=_seconds(seconds))
    properties = ET.Element("properties")
    for key, value in sorted(results.settings.items()):
        ET.SubElement(properties, "property", {"name": key, "value": str(value)})
    ET.SubElement(properties, "property", {
        "name": "git_sha", "value": str(results.provenance.get("git_sha", "unknown"))})
    suite.insert(0, properties)
    root = ET.Element("testsuites", {"name": "ptlab", "tests": str(total),
                                     "failures": str(counts["failure"]),
                                     "errors": str(counts["error"]), "time": _seconds(seconds)})
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def write_junit(results: Results, spec_name: str, path: Path,
                corrupted_cells: Sequence[str] = ()) -> None:
    path.write_text(junit_xml(results, spec_name, corrupted_cells), encoding="utf-8")
