"""``python -m planner.fence.check [PATH]`` (``make fence-check``): check the default
configurations and save the report the fencing notebook shows."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from planner.errors import CodedError
from planner.fence.check.exploration import CheckProgress, check_defaults
from planner.fence.check.report import REPORT_FILE, report_path, write_report


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m planner.fence.check [PATH]``: check the defaults and save the report."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m planner.fence.check",
                                     description=main.__doc__)
    parser.add_argument("path", nargs="?", type=Path, default=None,
                        help=f"where to write (default: the data directory's {REPORT_FILE})")
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)

    def hear(name: str, where: CheckProgress) -> None:
        if where.done:
            print(f"{name}: {where.states_explored:,} states, depth {where.depth}",
                  flush=True)

    target = report_path() if args.path is None else args.path
    # Refused before minutes of checking, not after.
    if not target.parent.is_dir() or target.is_dir():
        print(f"error: cannot write {target}: its folder does not exist or it is a folder",
              file=sys.stderr)
        return 2
    try:
        report = check_defaults(workers=args.workers, progress=hear)
        written = write_report(report, target)
    except CodedError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"error: cannot write {target}: {error.strerror or error}", file=sys.stderr)
        return 2
    print(f"wrote {written} ({report.states_explored:,} states)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
