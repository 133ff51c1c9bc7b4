"""Loading and saving fleet files, and writing any text file atomically."""

from __future__ import annotations

import errno
import fcntl
import glob
import os
import stat
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO

from planner._validate import shown
from planner.fleet._errors import FleetFileError
from planner.fleet._json import fleet_to_json, parse_fleet_json
from planner.fleet._toml import fleet_to_toml, parse_fleet_toml
from planner.fleet.document import FleetDocument
from planner.fleet.edit import edited_toml, toml_comments


def _format_of(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in (".toml", ".json"):
        return suffix[1:]
    raise FleetFileError("UnsupportedFormat",
                         f"a fleet file ends in .toml or .json (got {path.suffix or 'none'!r})",
                         path=str(path))


def read_regular_file(path: Path, what: str = "fleet file") -> bytes:
    """The bytes of ``path``, refusing anything but a regular file (``what`` it should
    be, as the message says it) before reading it.

    Opening without blocking means a FIFO or a device named ``x.toml`` is refused at
    once instead of waiting for a writer that never comes.
    """
    if "\0" in str(path):
        raise FleetFileError("UnreadableFile", "is no file name: it holds a NUL byte",
                             path=str(path).replace("\0", "\\0"))
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise FleetFileError("FileNotFound", "no such file", path=str(path)) from None
    except IsADirectoryError:
        raise FleetFileError("FileNotFound", f"is a folder, not a {what}",
                             path=str(path)) from None
    except OSError as error:
        raise FleetFileError("UnreadableFile", f"cannot be read: {error.strerror}",
                             path=str(path)) from None
    try:
        mode = os.fstat(descriptor).st_mode
        if stat.S_ISDIR(mode):
            raise FleetFileError("FileNotFound", f"is a folder, not a {what}",
                                 path=str(path))
        if not stat.S_ISREG(mode):
            raise FleetFileError("UnreadableFile", "is not a regular file (a pipe, socket "
                                 f"or device); give the path of a {what}", path=str(path))
        os.set_blocking(descriptor, True)
        with os.fdopen(descriptor, "rb", closefd=False) as stream:
            return stream.read()
    except OSError as error:
        raise FleetFileError("UnreadableFile", f"cannot be read: {error.strerror}",
                             path=str(path)) from None
    finally:
        os.close(descriptor)


def example_fleet(name: str) -> Path:
    """The path of the example fleet file ``name`` shipped with the package
    (``"qwen480b-5x80"`` or ``"qwen480b-5x80.toml"``), wherever the package is installed
    or the caller runs."""
    from planner.models.presets import data_dir  # the one place the data directory is found

    folder = data_dir() / "fleets"
    stem = name[:-5] if name.endswith(".toml") else name
    path = folder / f"{stem}.toml"
    if "/" in stem or stem.startswith(".") or not path.is_file():
        known = ", ".join(sorted(p.stem for p in folder.glob("*.toml"))) or "none"
        raise FleetFileError("FileNotFound", f"no example fleet {name!r}; the examples are "
                             f"{known}", path=str(path))
    return path


def load_fleet(path: str | Path) -> FleetDocument:
    """Read a ``.toml`` fleet file or a ``.json`` planning request."""
    file_path = Path(path)
    kind = _format_of(file_path)
    data = read_regular_file(file_path)
    try:
        # Read as text mode would: any line ending becomes "\n".
        text = data.decode("utf-8-sig").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError:
        raise FleetFileError("InvalidToml" if kind == "toml" else "InvalidJson",
                             "is not UTF-8 text", path=str(file_path)) from None
    if kind == "toml":
        return parse_fleet_toml(text, source=str(file_path))
    return parse_fleet_json(text, source=str(file_path))


def _rebased(document: FleetDocument, destination: Path) -> FleetDocument:
    """Keep a relative GGUF path pointing at the same file from the new folder."""
    gguf = document.model.gguf
    base = document.base_dir
    path = document.model.gguf_path()
    if gguf is None or base is None or path is None or path.is_absolute():
        return document
    # The file's part of the path is joined as text: it need not exist (nor be a name
    # a file system takes) for the path to keep pointing at it.
    target = os.path.normpath(base.resolve() / gguf)
    new_base = destination.parent.resolve()
    if base.resolve() == new_base:
        return document
    relative = os.path.relpath(target, new_base)
    return replace(document, model=replace(document.model, gguf=Path(relative).as_posix()))


def _remove_stale_temporaries(destination: Path) -> None:
    """Delete temporary files a save of ``destination`` left behind when its process was
    killed. A save holds a lock on its temporary file until the rename, so a file whose
    lock can be taken belongs to no running save. Only names ``mkstemp`` makes are
    looked at (eight characters between the name and ``.tmp``)."""
    for stale in destination.parent.glob(f".{glob.escape(destination.name)}.{'?' * 8}.tmp"):
        try:
            descriptor = os.open(stale, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.stat(stale, follow_symlinks=False).st_ino == os.fstat(descriptor).st_ino:
                stale.unlink()
        except OSError:
            pass  # a save in progress holds it, or it is already gone
        finally:
            os.close(descriptor)


def _locked_temporary(destination: Path) -> tuple[int, str]:
    """A new temporary file beside ``destination``, locked by this process."""
    for _ in range(5):
        handle, temporary = tempfile.mkstemp(prefix=f".{destination.name}.", suffix=".tmp",
                                             dir=destination.parent)
        fcntl.flock(handle, fcntl.LOCK_EX)
        if os.fstat(handle).st_nlink > 0:
            return handle, temporary
        # Another save's clean-up removed it between its creation and the lock.
        os.close(handle)
    raise OSError(errno.EAGAIN, "temporary files keep disappearing")


def write_text_atomic(path: str | Path, text: str, *, overwrite: bool = True) -> Path:
    """Write ``text`` to ``path`` as UTF-8, atomically (:func:`write_file_atomic`)."""
    return write_file_atomic(path, lambda stream: stream.write(text.encode("utf-8")),
                             overwrite=overwrite)


def write_file_atomic(path: str | Path, write: Callable[[BinaryIO], object], *,
                      private_folder: bool = False, overwrite: bool = True) -> Path:
    """Write ``path`` through ``write(stream)`` so that readers see the old file or the
    new, never half.

    ``write`` fills a fresh temporary file made beside ``path`` (same file system), created
    exclusively (``O_EXCL``, so no file or link already there is opened) and locked; it is
    flushed to disk and then replaces ``path`` in one ``os.replace``. The path given is the
    only link followed: a symbolic link at ``path`` is written through (its target is
    replaced and the link kept). Temporary files that a killed save left behind are
    removed. ``private_folder``: ``path`` is in a folder the caller made and locked (a
    sweep's parts): a link there is replaced, never followed, and no leftovers are looked
    for (the caller removes the folder). Without ``overwrite``, anything already at
    ``path`` (a file, a link, a folder) is left alone and refused with ``WouldOverwrite``:
    the new file is linked into place, which fails if something is there, however late it
    came.
    """
    given = Path(path)
    if "\0" in str(given):
        raise FleetFileError("WriteFailed", "is no file name: it holds a NUL byte",
                             path=str(given).replace("\0", "\\0"))
    if not overwrite and os.path.lexists(given):
        raise _exists(given)
    try:
        destination = (Path(os.path.realpath(given))
                       if not private_folder and given.is_symlink() else given)
    except OSError as error:  # a name too long for the file system, say
        raise FleetFileError("WriteFailed", f"cannot be written: {error.strerror}",
                             path=str(given)) from None
    folder = destination.parent
    if not folder.is_dir():
        raise FleetFileError("WriteFailed", f"folder {str(folder)!r} does not exist",
                             path=str(given))
    try:
        if not private_folder:
            _remove_stale_temporaries(destination)
        handle, temporary = _locked_temporary(destination)
    except OSError as error:
        raise FleetFileError("WriteFailed", f"cannot be written: {error.strerror}",
                             path=str(given)) from None
    # The handle (and with it the lock) stays open until the rename is done.
    try:
        with os.fdopen(handle, "wb") as stream:
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())
            # mkstemp creates the file private to its owner; these are ordinary files.
            try:
                old = os.stat(destination, follow_symlinks=False)
                mode = old.st_mode & 0o777 if stat.S_ISREG(old.st_mode) else 0o644
            except FileNotFoundError:
                mode = 0o644
            os.chmod(temporary, mode)
            if overwrite:
                os.replace(temporary, destination)
            else:
                os.link(temporary, destination)
                os.unlink(temporary)
    except BaseException as error:
        Path(temporary).unlink(missing_ok=True)
        if isinstance(error, FileExistsError):
            raise _exists(given) from None
        if isinstance(error, OSError):
            raise FleetFileError("WriteFailed", f"cannot be written: {error.strerror}",
                                 path=str(given)) from None
        raise
    return given


def _exists(path: Path) -> FleetFileError:
    return FleetFileError("WouldOverwrite", "already exists, and is not overwritten unless "
                          "asked (--force)", path=str(path))


def save_fleet(document: FleetDocument, path: str | Path, *,
               drop_comments: bool = False, overwrite: bool = True) -> Path:
    """Write ``document`` as ``.toml`` or ``.json`` (by extension), atomically.

    An interrupted save leaves either the old file or the new one, never half of one.
    A relative GGUF path is rewritten so it still names the same file from the new folder.
    Saving over a TOML fleet file keeps its comments and layout (see
    :mod:`planner.fleet.edit`). A file that cannot be edited faithfully (its nodes as
    one inline array, say) is rewritten whole; when that would lose comments the save
    raises ``CommentsWouldBeLost`` and writes nothing, unless ``drop_comments``.
    Without ``overwrite`` a file already there is refused (``WouldOverwrite``) and left
    alone.
    """
    destination = Path(path)
    text, lost = _saved_text(document, destination)
    if not overwrite:  # anything there is refused, so nothing of it is kept or lost
        return write_text_atomic(destination, text, overwrite=False)
    if lost and not drop_comments:
        raise FleetFileError(
            "CommentsWouldBeLost",
            f"has {len(lost):,} comment(s) that saving cannot keep (the first: "
            f"{shown(lost[0])}), because its layout cannot be edited in place; "
            f"{KEEP_COMMENTS_HINT}", path=str(destination))
    return write_text_atomic(destination, text)


def comments_lost_by_save(document: FleetDocument, path: str | Path) -> list[str]:
    """The comments of the file at ``path`` that :func:`save_fleet` of ``document`` there
    would drop (none when nothing is there, or its layout can be edited in place)."""
    return _saved_text(document, Path(path))[1]


def _saved_text(document: FleetDocument, destination: Path) -> tuple[str, list[str]]:
    """What saving ``document`` at ``destination`` writes, and the comments of the file
    there that it drops."""
    kind = _format_of(destination)
    document = _rebased(document, destination)
    text = fleet_to_json(document) if kind == "json" else fleet_to_toml(document)
    try:
        old = read_regular_file(destination).decode("utf-8-sig")
    except (FleetFileError, UnicodeDecodeError):
        return text, []  # nothing there to keep
    kept = edited_toml(old, text) if kind == "toml" else None
    if kept is not None:
        return kept, []
    written = set(toml_comments(text))
    return text, [comment for comment in toml_comments(old) if comment not in written]


KEEP_COMMENTS_HINT = ("save under another name, or save again with drop_comments=True to "
                      "overwrite it without them")
"""What ``CommentsWouldBeLost`` tells the person to do; other front-ends replace it."""

