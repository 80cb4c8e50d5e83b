"""``python -m transports.obfs4 client|server ...``: obfs4 without tor.

The same as ``python -m transports.lab_mode`` with ``--transport obfs4``: the
client serves SOCKS5 (pass ``cert=...;iat-mode=N`` as SOCKS5 username), the
server relays to ``--upstream`` and writes ``obfs4_state.json`` and
``obfs4_bridgeline.txt`` in ``--state``.
"""

import sys

from ..lab_mode import main

if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv and argv[0] in ("client", "server") and "--transport" not in argv:
        argv = [argv[0], "--transport", "obfs4", *argv[1:]]
    raise SystemExit(main(argv))
