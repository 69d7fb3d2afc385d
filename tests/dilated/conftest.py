"""tests/dilated on sys.path (dilated_worker must be importable by the spawned ranks)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
