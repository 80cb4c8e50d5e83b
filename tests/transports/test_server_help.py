"""Every server's --help works under ``python -OO``, which drops docstrings: the
meek server, the Snowflake bridge and Conjure's station read their description
from ``main.__doc__`` and must not fail without it."""

from __future__ import annotations

import pytest

from transports.conjure import station
from transports.meek import server as meekserver
from transports.snowflake import server as sfserver


@pytest.mark.parametrize("module", [meekserver, sfserver, station],
                         ids=["meek", "snowflake-bridge", "conjure-station"])
def test_the_help_needs_no_docstrings(module, monkeypatch, capsys):
    monkeypatch.setattr(module.main, "__doc__", None)
    with pytest.raises(SystemExit) as exit_:
        module.main(["--help"])
    assert exit_.value.code == 0
    assert "--listen" in capsys.readouterr().out
