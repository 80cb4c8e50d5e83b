from __future__ import annotations

import pytest

from broker.labgeo import GeoIPError, LabGeoIP


def test_longest_prefix_wins_and_unknown_is_question_marks(tmp_path):
    geo = LabGeoIP({"198.18.0.0/15": "DE", "198.18.0.0/24": "IR", "2001:db8::/32": "RU"})
    assert geo.country("198.18.0.7") == "IR"
    assert geo.country("198.19.1.1") == "DE"
    assert geo.country("2001:db8::1") == "RU"
    assert geo.country("203.0.113.1") == "??" and geo.country("nonsense") == "??"
    assert geo.countries() == ["??", "DE", "IR", "RU"]
    f = tmp_path / "geo.txt"
    f.write_text("# lab countries\n198.18.0.0/24 CN\n\n198.18.5.0/24 US  # servers\n")
    assert LabGeoIP.load(f).country("198.18.5.9") == "US"


@pytest.mark.parametrize("text, why", [("198.18.0.1/24 CN", "host bits"),
                                       ("198.18.0.0/24 China", "two capital"),
                                       ("198.18.0.0/24", "expected 'PREFIX CC'")])
def test_bad_lines_are_refused_with_their_line_number(tmp_path, text, why):
    f = tmp_path / "geo.txt"
    f.write_text(text + "\n")
    with pytest.raises(GeoIPError, match=why):
        LabGeoIP.load(f)
