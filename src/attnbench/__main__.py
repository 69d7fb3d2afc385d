"""`python -m attnbench run notebooks/x.md --env python` (for machines without uv)."""

from attnbench.notebook.cli import main

raise SystemExit(main())
