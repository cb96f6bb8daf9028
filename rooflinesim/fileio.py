"""Reading the files a user gives and writing the files the tool produces.

Reading (`read_text_limited`): every file input (traces, engine logs and metrics, specs, profiles, reports,
checkpoint configs) is read through one helper that refuses, with one line naming the file, what is not a regular
file (a folder, a character or block device such as /dev/zero, a FIFO, a socket) before opening it, a file larger
than a byte limit, a line longer than a line-length limit, and text that is not UTF-8. So no input can make the tool
read forever (/dev/zero, a FIFO nobody writes to) or hold gigabytes in memory.

Writing: never half-written, and the target checked before any long work starts.

Every file goes to a temporary sibling, is flushed and fsynced, then renamed over the target (`os.replace` is atomic
on POSIX and Windows), so a crash, a full disk or Ctrl-C leaves the old file or none, never a truncated one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import IO, Iterator

from .errors import InputError
from .units import MIB


def check_output_path(path: str | Path, what: str = "output", suffixes: tuple[str, ...] = (),
                      create_parent: bool = False) -> Path:
    """Fail early, with one line, when `path` cannot be written: a folder, a missing or read-only parent folder, a
    device or FIFO, a name the file system refuses (too long, a NUL byte), or a wrong suffix. Called before any
    long work starts. With `create_parent` a missing parent folder is fine when it can be created (the writer
    creates it; see `check_output_dir`)."""
    try:
        return _check_output_path(Path(path), what, suffixes, create_parent)
    except (OSError, ValueError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(f"{what} {str(path)!r} cannot be written: {getattr(exc, 'strerror', None) or exc}") from None


def _check_output_path(path: Path, what: str, suffixes: tuple[str, ...], create_parent: bool) -> Path:
    _check_name(path, what)
    if suffixes and path.suffix.lower() not in suffixes:
        raise InputError(f"{what} {str(path)!r} must end in {' or '.join(suffixes)}")
    if path.is_dir():
        raise InputError(f"{what} {str(path)!r} is a folder; give a file name")
    _check_not_special(path, what)
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


def _check_name(path: Path, what: str) -> None:
    """Path methods answer False for a name with a NUL character rather than fail; the write would fail late."""
    if "\x00" in str(path):
        raise InputError(f"{what} {str(path)!r} has a NUL character in its name")


def _check_not_special(path: Path, what: str) -> None:
    """An existing target that is not a regular file (/dev/zero, a FIFO, a socket) is refused: the atomic rename
    would replace the device or FIFO itself, and as root even /dev/null would become a regular file."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return  # missing (or unreachable: the parent checks say why)
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{what} {str(path)!r} exists and is not a regular file; give a file name")


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
    try:
        return _check_output_dir(Path(path), what)
    except (OSError, ValueError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(f"{what} {str(path)!r} cannot be written: {getattr(exc, 'strerror', None) or exc}") from None


def _check_output_dir(path: Path, what: str) -> Path:
    _check_name(path, what)
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
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot write {str(path)!r}: {getattr(exc, 'strerror', None) or exc}") from None
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


#: the default limits of `read_text_limited`: no input the tool reads is larger or has longer lines
MAX_INPUT_BYTES = 64 * MIB
MAX_LINE_CHARS = MIB

_SPECIAL_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
                  (stat.S_ISSOCK, "a socket"))


class FileInputError(InputError):
    """A file input refused by `read_text_limited`: `what` (the role of the file), `path` and `reason` apart, so a
    caller with its own message style (specs: 'file: reason') can say it its way."""

    def __init__(self, what: str, path, reason: str):
        self.what, self.path, self.reason = what, str(path), reason
        if reason == "not found":
            super().__init__(f"{what} not found: cannot read {self.path!r}")
        else:  # "trace 'x' is a folder, ...", "trace 'x': cannot read: ..."
            super().__init__(f"{what} {self.path!r}{' ' if reason.startswith('is ') else ': '}{reason}")


def _size(n_bytes: int) -> str:
    return f"{n_bytes / MIB:,.1f} MiB" if n_bytes >= MIB else f"{n_bytes:,} bytes"


def check_regular_file(path: str | Path, what: str = "input file") -> os.stat_result:
    """The stat of `path` when it is an existing regular file (symbolic links followed); otherwise a one-line
    FileInputError: not found, a folder, a device / FIFO / socket, a symbolic-link loop, or not accessible."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise FileInputError(what, path, "not found") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL character in the name
        loop = isinstance(exc, OSError) and exc.errno == errno.ELOOP
        reason = "a symbolic-link loop" if loop else getattr(exc, "strerror", None) or str(exc)
        raise FileInputError(what, path, f"cannot read: {reason}") from None
    if stat.S_ISDIR(info.st_mode):
        raise FileInputError(what, path, "is a folder, not a file")
    for test, kind in _SPECIAL_KINDS:
        if test(info.st_mode):
            raise FileInputError(what, path, f"is {kind}, not a regular file")
    if not stat.S_ISREG(info.st_mode):
        raise FileInputError(what, path, "is not a regular file")
    return info


def read_bytes_limited(path: str | Path, what: str = "input file", max_bytes: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; anything else is a one-line FileInputError."""
    info = check_regular_file(path, what)
    limit = f"is larger than the {_size(max_bytes)} limit"
    if info.st_size > max_bytes:
        raise FileInputError(what, path, f"{limit} ({_size(info.st_size)})")
    try:
        # O_NONBLOCK: should the file be swapped for a FIFO after the check, opening it does not wait for a writer
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise FileInputError(what, path, f"cannot read: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FileInputError(what, path, "is not a regular file")
        chunks, total = [], 0
        while total <= max_bytes:  # files in /proc and /sys report size 0: the limit is enforced on what is read
            chunk = os.read(fd, min(MIB, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise FileInputError(what, path, f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if total > max_bytes:
        raise FileInputError(what, path, limit)
    return b"".join(chunks)


def read_text_limited(path: str | Path, what: str = "input file", max_bytes: int = MAX_INPUT_BYTES,
                      max_line_chars: int = MAX_LINE_CHARS, errors: str = "strict") -> str:
    """The UTF-8 text of a regular file with at most `max_bytes` bytes and no line longer than `max_line_chars`
    characters; anything else is a one-line FileInputError naming the file and the reason (see the module
    docstring). `errors="replace"` reads text with a few undecodable bytes (an engine log) instead of refusing it."""
    data = read_bytes_limited(path, what, max_bytes)
    try:
        text = data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as exc:
        raise FileInputError(what, path, f"is not a text file (not UTF-8 at byte {exc.start})") from None
    if len(text) > max_line_chars:
        for number, line in enumerate(text.split("\n"), 1):
            if len(line) > max_line_chars:
                raise FileInputError(what, path, f"line {number} is longer than the {max_line_chars:,}-character "
                                                 "limit")
    return text


__all__ = ["check_output_path", "check_output_dir", "open_atomic", "write_text_atomic", "write_bytes_atomic",
           "FileInputError", "check_regular_file", "read_bytes_limited", "read_text_limited", "MAX_INPUT_BYTES",
           "MAX_LINE_CHARS"]
