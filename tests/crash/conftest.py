"""The crash-consistency tests' harness, ``crashkit``, importable from the tests.

``crashkit`` is a plain package beside the tests; under ``--import-mode=importlib`` a test
module cannot import its neighbours, so this directory goes on ``sys.path`` once here. The
counts the tests record are printed by ``tests/conftest.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
