"""``python -m tarry.cli``: the ``tarry`` command."""

from tarry.cli import main

raise SystemExit(main())
