"""``python -m broker``'s client buffer: a cap on connections from what each may hold."""

from __future__ import annotations

from broker.__main__ import connection_cap, main
from broker.app import READ_LIMIT


def test_the_client_buffer_caps_connections_at_twice_the_read_limit_each():
    assert connection_cap(1000 * 2 * READ_LIMIT, READ_LIMIT) == 1000
    assert connection_cap(1000 * 2 * READ_LIMIT - 1, READ_LIMIT) == 999  # across the bound
    assert connection_cap(1, READ_LIMIT) == 32  # never below httpguard's own floor
    assert connection_cap(96 << 20, READ_LIMIT) == 503  # the default: above 480 at 1,024


def test_a_bad_client_buffer_is_refused_in_one_line(capsys):
    assert main(["--addr", "127.0.0.1:9", "--disable-tls", "--client-buffer", "0"]) == 2
    assert capsys.readouterr().err == "broker: --client-buffer must be a positive number of bytes\n"
