"""Where a sweep keeps its work: the output file, checked and locked before anything is
computed; each finished batch, saved at once under ``<output>.parts/`` and checked record
by record when read back; and the fingerprints of the files a scenario reads.

One sweep at a time writes an output: the parts folder is made and locked (``flock``)
before anything else is touched and held for the whole run, so a second sweep writing
the same file stops at once with ``OutputUnavailable`` (it does not wait) instead of
removing the first one's work. Every file a sweep writes goes through a fresh temporary
file made exclusively beside it (:func:`write_output`); the output is the only path
given by the user and the only link followed: a link in the parts folder's place is
refused, and links inside it are neither written through nor read. A saved record is used
again only when it is whole and plausible (:meth:`PartsFolder.load`); any other (cut
off, edited, not UTF-8, a value out of range) is skipped with a warning and its scenario
evaluated again, so no bad file under the folder can stop a sweep.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import stat
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from planner._validate import shown
from planner.errors import CodedError
from planner.fleet import FleetFileError, write_file_atomic

DIGEST_BYTES = 1 << 20
"""A file's fingerprint hashes at most this many bytes from its start and as many from
its end, with its size and modification time: bounded for a GGUF file of any size."""

RECORD_BYTES = 1 << 20
"""A saved record longer than this is not one the sweep wrote: it is skipped unread."""

Check = Callable[[Mapping[str, Any]], str | None]
"""Why a saved record cannot be a result, or ``None``."""


class SweepOutputError(CodedError):
    """``OutputUnavailable``: the sweep's output cannot be written (its folder is missing
    or read-only, it is a folder) or another sweep is writing it; found before any
    scenario is evaluated."""

    codes = ("OutputUnavailable",)


class SweepWarning(UserWarning):
    """Something a sweep worked around: saved records it could not use."""


def warn(message: str) -> None:
    """The default for a sweep's ``warn``: a :class:`SweepWarning`."""
    warnings.warn(message, SweepWarning, stacklevel=3)


# -- fingerprints -----------------------------------------------------------------------


def file_fingerprint(path: str | Path) -> str:
    """What identifies the contents of ``path`` cheaply: its size, modification time and
    a hash of its first and last :data:`DIGEST_BYTES` bytes. A path that is not a regular
    file (missing, a folder, a FIFO, a device) is named by what it is, unread: the
    scenario that reads it reports the error."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        return f"unreadable: {error.strerror}"
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            return "not a regular file"
        digest = hashlib.sha256()
        digest.update(os.pread(descriptor, DIGEST_BYTES, 0))
        if info.st_size > DIGEST_BYTES:
            start = max(DIGEST_BYTES, info.st_size - DIGEST_BYTES)
            digest.update(os.pread(descriptor, DIGEST_BYTES, start))
        return f"{info.st_size}:{info.st_mtime_ns}:{digest.hexdigest()}"
    except OSError as error:
        return f"unreadable: {error.strerror}"
    finally:
        os.close(descriptor)


# -- the output and its parts -----------------------------------------------------------


def _unavailable(output: Path, why: str) -> SweepOutputError:
    return SweepOutputError("OutputUnavailable", f"cannot write {output}: {why}",
                            path=str(output))


def check_output(output: Path) -> None:
    """Refuse an output that cannot be written, before anything is computed or made:
    a missing folder, or something other than a file (or a link to one) in its place."""
    folder = output.parent
    if not folder.is_dir():
        raise _unavailable(output, f"its folder {folder} does not exist")
    if output.exists() and not output.is_file():
        raise _unavailable(output, "it is not a regular file")


def write_output(output: Path, write: Callable[[BinaryIO], object], *,
                 private_folder: bool = False) -> None:
    """Write ``output`` atomically through a fresh temporary file beside it
    (:func:`planner.fleet.write_file_atomic`): no file or link that is already there
    under another name is opened, emptied or removed."""
    try:
        write_file_atomic(output, write, private_folder=private_folder)
    except FleetFileError as error:
        raise _unavailable(output, error.message) from None


_STALE = "stale"
"""A record of an older input (an edited fleet file): evaluated again, without a warning."""


class PartsFolder:
    """The finished batches of a sweep writing ``output``, as JSON lines (floats
    round-trip exactly) under ``<output>.parts/``, locked while the sweep runs. With no
    output, nothing is saved."""

    def __init__(self, output: Path | None) -> None:
        self.output = output
        self.folder = None if output is None else output.with_name(output.name + ".parts")
        self.count = 0
        self._lock: int | None = None

    def __enter__(self) -> PartsFolder:
        if self.output is not None:
            check_output(self.output)
            self._lock = self._acquire()
            try:
                # Whether the folder takes new files (it may be read-only): a nameless
                # file, so nothing already there is touched.
                tempfile.TemporaryFile(dir=self.output.parent).close()
            except OSError as error:
                self.__exit__()
                raise _unavailable(self.output, error.strerror or "it cannot be created"
                                   ) from None
        return self

    def __exit__(self, *exc: object) -> None:
        if self._lock is not None:
            os.close(self._lock)  # releases the lock
            self._lock = None

    def _acquire(self) -> int:
        assert self.folder is not None and self.output is not None
        for _ in range(5):
            try:
                self.folder.mkdir(exist_ok=True)
                # A link in the folder's place is refused, never followed: the parts
                # would land wherever it points.
                descriptor = os.open(self.folder,
                                     os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            except OSError as error:
                if self.folder.is_symlink():
                    raise _unavailable(self.output, f"its parts folder {self.folder} is a "
                                       "symbolic link; a sweep makes its own parts folder "
                                       "(remove the link)") from None
                raise _unavailable(self.output, f"cannot make {self.folder} "
                                   f"({error.strerror})") from None
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(descriptor)
                raise _unavailable(self.output, "another sweep is writing it (its parts "
                                   f"folder {self.folder} is locked)") from None
            # The folder may have been removed (its sweep finished) between making and
            # locking it: lock the folder that is there now.
            with contextlib.suppress(OSError):
                if os.stat(self.folder).st_ino == os.fstat(descriptor).st_ino:
                    return descriptor
            os.close(descriptor)
        raise _unavailable(self.output, f"its parts folder {self.folder} keeps changing")

    def _part_files(self) -> Iterator[Path]:
        if self.folder is None or not self.folder.is_dir():
            return iter(())
        return iter(sorted(self.folder.glob("part-*.jsonl")))

    def load(self, current_key: Callable[[int], str | None], check: Check,
             warn: Callable[[str], None] = warn) -> dict[int, dict[str, Any]]:
        """The saved records still valid: ``current_key(scenario)`` is the key the
        scenario has now (``None`` for no such scenario), and ``check`` says what is wrong
        with a record. Bad records are skipped; ``warn`` hears how many and the first."""
        done: dict[int, dict[str, Any]] = {}
        bad: list[str] = []
        for part in self._part_files():
            self.count += 1
            for number, problem, record in _records(part):
                if problem is None and record is not None:
                    problem = _problem(record, current_key, check)
                    if problem is None:
                        done[record["scenario"]] = record
                        continue
                if problem != _STALE:
                    bad.append(f"{part.name}, line {number}: {problem}")
        if bad:
            warn(f"skipped {len(bad):,} saved record(s) under {self.folder} that are not "
                 f"results of this sweep (first: {bad[0]}); their scenarios are evaluated "
                 "again")
        return done

    def save(self, records: Sequence[Mapping[str, Any]]) -> None:
        if self.folder is None:
            return
        self.count += 1
        text = "".join(json.dumps(r, allow_nan=False) + "\n" for r in records)
        write_output(self.folder / f"part-{os.getpid()}-{self.count:06d}.jsonl",
                     lambda stream: stream.write(text.encode("utf-8")), private_folder=True)

    def clear(self) -> None:
        """Remove the parts folder this sweep holds (only that folder: a link put in its
        place since is left alone)."""
        if self.folder is None or self._lock is None:
            return
        with contextlib.suppress(OSError):
            if os.stat(self.folder, follow_symlinks=False).st_ino == os.fstat(
                    self._lock).st_ino:
                shutil.rmtree(self.folder)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _records(part: Path) -> Iterator[tuple[int, str | None, dict[str, Any] | None]]:
    """``(line number, problem, record)`` of each line of a part file."""
    try:
        descriptor = os.open(part, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError as error:
        yield 0, ("a symbolic link, not a part a sweep wrote" if error.errno == errno.ELOOP
                  else f"cannot be read ({error.strerror})"), None
        return
    with os.fdopen(descriptor, "rb") as stream:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            yield 0, "not a regular file", None
            return
        os.set_blocking(descriptor, True)
        number = 0
        while True:
            line = stream.readline(RECORD_BYTES + 1)
            if not line:
                return
            number += 1
            if len(line) > RECORD_BYTES:
                while line and not line.endswith(b"\n"):  # the rest of the long line
                    line = stream.readline(RECORD_BYTES)
                yield number, f"longer than {RECORD_BYTES:,} bytes", None
                continue
            try:
                record = json.loads(line.decode("utf-8"), parse_constant=_refuse_constant)
            except UnicodeDecodeError:
                yield number, "not UTF-8 text", None
                continue
            except (ValueError, RecursionError) as error:
                yield number, f"not a JSON record ({shown(str(error))})", None
                continue
            if not isinstance(record, dict):
                yield number, "not a JSON object", None
                continue
            yield number, None, record


def _problem(record: Mapping[str, Any], current_key: Callable[[int], str | None],
             check: Check) -> str | None:
    index = record.get("scenario")
    if isinstance(index, bool) or not isinstance(index, int):
        return f"scenario must be a whole number (got {shown(index)})"
    key = current_key(index)
    if key is None:
        return f"the grid has no scenario {shown(index)}"
    if not isinstance(record.get("scenario_key"), str):
        return f"scenario_key must be text (got {shown(record.get('scenario_key'))})"
    if record["scenario_key"] != key:
        return _STALE
    return check(record)
