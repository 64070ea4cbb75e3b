import sys
from pathlib import Path

pytest_plugins = ["pytester"]

# The tutorial's example backend lives with the docs (docs/examples/subprocess_backend.py);
# the tests import it as `subprocess_backend`.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs" / "examples"))
