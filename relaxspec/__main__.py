"""``python -m relaxspec``: the command line."""

from relaxspec.cli import main

raise SystemExit(main())
