"""The core stays pure: importing it loads no widget or plotting library."""

from __future__ import annotations

import subprocess
import sys

CORE = ["planner", "planner.planning", "planner.fence", "planner.models", "planner.units",
        "planner.fleetfile", "planner.reports.content", "planner.availability"]


def test_core_imports_no_widgets_or_plotting() -> None:
    script = (
        "import importlib, sys\n"
        f"for name in {CORE!r}: importlib.import_module(name)\n"
        "loaded = sorted(m for m in sys.modules\n"
        "                if m.split('.')[0] in {'ipywidgets', 'plotly', 'anywidget', 'IPython'})\n"
        "print(','.join(loaded))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == ""
