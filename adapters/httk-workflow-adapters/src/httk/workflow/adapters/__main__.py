"""``python -m httk.workflow.adapters`` is the operator CLI (the ``httk-workflow`` command)."""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
