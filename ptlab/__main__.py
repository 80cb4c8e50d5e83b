"""``python -m ptlab`` is the ``ptlab`` command."""

from .cli import main

raise SystemExit(main())
