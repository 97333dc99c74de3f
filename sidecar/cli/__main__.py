"""``python -m sidecar.cli``: the ``shadowtrial`` command."""

from sidecar.cli.main import main

raise SystemExit(main())
