"""``python3 -m httk.workflow.adapter_runtime REQUEST.json``."""

from __future__ import annotations

from . import main

if __name__ == "__main__":
    raise SystemExit(main())
