from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

TESTS = Path(__file__).resolve().parent
DATA = TESTS / "data"
sys.path.insert(0, str(TESTS))

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "default")
