"""`ptlab run --junit FILE`: one JUnit test case per cell, valid against the schema CI
systems read (tests/support/junit.xsd: Jenkins' xUnit junit-10 dialect)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ptlab.output.junit import junit_xml, write_junit
from tests.support.rows import blocked_row, error_row, reachable_row, results_of, skipped_row

xmlschema = pytest.importorskip("xmlschema")
SCHEMA = xmlschema.XMLSchema(str(Path(__file__).resolve().parents[2] / "support" / "junit.xsd"))


def matrix() -> str:
    rows = [reachable_row(cell_seconds=7.25), blocked_row(cell_seconds=3.0),
            error_row(cell_seconds=15.0), skipped_row(),
            reachable_row(transport="direct", censor="gfw", expectation=None,
                          expectation_met=None, cell_seconds=2.0)]
    res = results_of(rows, settings={"workloads.bulk.size": 1_000_000},
                     provenance={"git_sha": "abc123"})
    return junit_xml(res, "default", corrupted_cells=["direct × gfw"])


def test_the_document_is_valid_junit():
    SCHEMA.validate(matrix())  # raises on any departure from the schema


def test_the_schema_refuses_what_ci_systems_cannot_read():
    # The check can fail: a suite without its counts, a case without a name.
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        SCHEMA.validate('<testsuites><testsuite name="x"/></testsuites>')
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        SCHEMA.validate('<testsuites><testsuite name="x" tests="1" failures="0" errors="0">'
                        "<testcase/></testsuite></testsuites>")


def test_one_case_per_cell_with_its_outcome():
    suite = ET.fromstring(matrix()).find("testsuite")
    assert suite is not None
    assert (suite.get("name"), suite.get("tests"), suite.get("failures"), suite.get("errors"),
            suite.get("skipped")) == ("default", "5", "2", "1", "1")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert list(cases) == ["obfs4 × none", "obfs4 × gfw", "meek × none",
                           "sb-vless-reality × none", "direct × gfw"]
    assert [child.tag for child in cases["obfs4 × none"]] == ["system-out"]
    assert cases["obfs4 × none"].get("time") == "7.250"
    assert cases["obfs4 × none"].get("classname") == "ptlab.default.obfs4"
    failure = cases["obfs4 × gfw"].find("failure")
    assert failure is not None and failure.get("type") == "expectation"
    assert failure.get("message") == "expected reachable, got blocked"
    error = cases["meek × none"].find("error")
    assert error is not None and error.get("message") == "bridge not ready"
    skipped = cases["sb-vless-reality × none"].find("skipped")
    assert skipped is not None and "with_utls" in (skipped.get("message") or "")
    corrupted = cases["direct × gfw"].find("failure")
    assert corrupted is not None and corrupted.get("type") == "corrupted"
    # The run's settings and code travel with the suite.
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props == {"workloads.bulk.size": "1000000", "git_sha": "abc123"}


def test_written_to_a_file(tmp_path):
    path = tmp_path / "cells.xml"
    write_junit(results_of([reachable_row()]), "default", path)
    SCHEMA.validate(str(path))
