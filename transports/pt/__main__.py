"""``python -m transports.pt``: run managed mode, as tor's ``ClientTransportPlugin ... exec``."""

from .managed import main

raise SystemExit(main())
