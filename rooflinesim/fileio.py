"""Writing files the tool produces: never half-written, and the target checked before any long work starts.

Every file goes to a temporary sibling, is flushed and fsynced, then renamed over the target (`os.replace` is atomic
on POSIX and Windows), so a crash, a full disk or Ctrl-C leaves the old file or none, never a truncated one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO, Iterator

from .errors import InputError


def check_output_path(path: str | Path, what: str = "output", suffixes: tuple[str, ...] = (),
                      create_parent: bool = False) -> Path:
    """Fail early, with one line, when `path` cannot be written: a folder, a missing or read-only parent folder, or
    a wrong suffix. Called before any long work starts. With `create_parent` a missing parent folder is fine when
    it can be created (the writer creates it; see `check_output_dir`)."""
    path = Path(path)
    if suffixes and path.suffix.lower() not in suffixes:
        raise InputError(f"{what} {str(path)!r} must end in {' or '.join(suffixes)}")
    if path.is_dir():
        raise InputError(f"{what} {str(path)!r} is a folder; give a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if create_parent and not parent.exists():
        check_output_dir(parent, f"{what} folder")
        return path
    if not parent.is_dir():
        raise InputError(f"{what} folder does not exist: {str(parent)!r}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{what} folder is not writable: {str(parent)!r}")
    if path.exists() and not os.access(path, os.W_OK):
        raise InputError(f"{what} {str(path)!r} exists and is not writable")
    _probe_writable(parent, f"{what} folder")
    return path


def _probe_writable(folder: Path, what: str) -> None:
    """Create and remove a temporary file in `folder`: the only test that holds for root (whom `os.access` always
    answers yes), read-only mounts and pseudo file systems such as /sys, where the real write would fail later."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".rooflinesim-probe.", suffix=".tmp", dir=str(folder))
    except OSError as exc:
        raise InputError(f"{what} is not writable: {str(folder)!r} ({exc.strerror or exc})") from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)


def check_output_dir(path: str | Path, what: str = "output folder") -> Path:
    """A folder to write into: an existing writable folder, or one that can be created (its nearest existing
    ancestor is a writable folder). It is not created here but by the writer (`write_text_atomic`), so a command
    refused after this check leaves no empty folder behind."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(f"{what} {str(path)!r} is a file, not a folder")
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise InputError(f"{what} {str(path)!r} cannot be created: {str(existing)!r} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"{what} {str(path)!r} is not writable")
    _probe_writable(existing, what)
    return path


@contextlib.contextmanager
def open_atomic(path: str | Path, mode: str = "w") -> Iterator[IO]:
    """Open a temporary sibling of `path` for writing; on a clean exit it is fsynced and renamed over `path`, on
    any exception it is removed and `path` is left as it was. An OSError becomes a one-line InputError."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent or Path(".")))
    except OSError as exc:
        raise InputError(f"cannot write {str(path)!r}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; the result is an ordinary file
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise InputError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
        raise


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write text via a temporary sibling + fsync + rename: the target is never half-written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_atomic(path, "w") as f:
        f.write(text)
    return path


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    path = Path(path)
    with open_atomic(path, "wb") as f:
        f.write(data)
    return path


__all__ = ["check_output_path", "check_output_dir", "open_atomic", "write_text_atomic", "write_bytes_atomic"]
