"""The fuzz targets import each other's helpers (harness, inputs_target) from this folder."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
