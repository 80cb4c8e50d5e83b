"""ptlab.processes.proxypool refuses bad input in one line before it starts any proxy.
(tests/ptlab/plugins/test_snowflake.py runs a pool in the lab.)"""

from __future__ import annotations

import pytest

from ptlab.processes.proxypool import main, source_address


@pytest.mark.parametrize("argv, complaint", [
    (["--netns", "ptlzzzz-nowhere", "--", "-broker", "http://198.18.5.2:8080/"],
     "no network namespace 'ptlzzzz-nowhere'"),
    (["--netns", "a", "--netns", "a", "--"], "a namespace is named twice"),
    (["--netns", "a", "--", "-metrics"], "-metrics serves one proxy"),
])
def test_bad_input_is_one_line_and_exit_2(argv, complaint, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert complaint in err and err.count("\n") == 1


def test_bad_proxy_flags_are_argparse_errors(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--netns", "a", "--", "-capacity", "-1"])
    assert exc.value.code == 2
    assert "-capacity must be >= 0" in capsys.readouterr().err


def test_the_source_address_is_the_routes_choice():
    assert source_address("http://127.0.0.1:8080/") == "127.0.0.1"
    assert source_address("not a url") == "?"
