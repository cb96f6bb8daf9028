"""The hostile input files of the command-line fuzzer (tests/fuzz_cli.py): special files, binary and broken text, the
spec files of the bad-input matrix; and the folder snapshots that show what a case wrote."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class FuzzFiles:
    """The hostile input files of a campaign, in their own folder (never the working folder of a case)."""

    folder: Path
    paths: dict[str, str] = field(default_factory=dict)
    _socket: socket.socket | None = None

    def values(self) -> list[str]:
        return list(self.paths.values())

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()


def _unreadable_path() -> str | None:
    """A regular file root cannot read either: chmod 000 stops nobody running as root, so a write-only sysctl
    (EACCES even for root) or the process's own memory file (EIO at offset 0) stands in for it."""
    for path in ("/proc/sys/vm/compact_memory", "/proc/self/mem"):
        if os.path.isfile(path):
            return path
    return None


def make_fuzz_files(folder: Path) -> FuzzFiles:
    """Write the hostile files: special files, binary and broken text, and the spec files of the bad-input matrix."""
    try:
        from hostile_files import write_hostile_files
    except ImportError:
        from tests.hostile_files import write_hostile_files

    folder.mkdir(parents=True, exist_ok=True)
    files = FuzzFiles(folder)
    specs = folder / "specs"
    specs.mkdir(exist_ok=True)
    files.paths.update({f"spec:{k}": v for k, v in write_hostile_files(specs).items()})
    contents = {
        "empty.jsonl": b"", "blank.txt": b"  \n\n\t\n", "binary.bin": bytes(range(256)) * 64,
        "binary.jsonl": bytes(range(128, 256)) * 8, "nul.txt": b"\x00" * 4096, "latin1.log": "café".encode("latin-1"),
        "long-line.log": b"x" * (2 * 2**20), "deep.json": b"[" * 100_000 + b"]" * 100_000, "deep-dash.yaml": b"- " * 30_000 + b"x\n",
        "huge-number.json": b'{"k": 4, "expected_tokens": 1e999}', "nan.json": b'{"k": NaN, "expected_tokens": NaN}',
        "trace-ok.jsonl": b'{"arrival_s": 0.1, "prompt_tokens": 64, "output_tokens": 8}\n' * 5,
        "trace-inf.jsonl": b'{"arrival_s": Infinity, "prompt_tokens": 1e400, "output_tokens": -1}\n',
        "trace-huge-gap.jsonl": b'{"arrival_s": 0, "prompt_tokens": 4, "output_tokens": 4}\n'
                                b'{"arrival_s": 1e9, "prompt_tokens": 4, "output_tokens": 4}\n',
        "prompts.txt": b"1 2 3\n4 5 6\n", "weird name ü.yaml": b"name: x\n",
        "config.png": b"\x89PNG\r\n\x1a\n", "out.csv": b"a,b\n", "report.json": b"{}",
    }
    for name, content in contents.items():
        (folder / name).write_bytes(content)
        files.paths[name] = str(folder / name)
    big = folder / "big-100MB.log"
    with open(big, "wb") as f:
        f.truncate(100 * 2**20)  # a 100 MB file without writing 100 MB
    files.paths["big"] = str(big)
    fifo = folder / "fifo"
    os.mkfifo(fifo)
    files.paths["fifo"] = str(fifo)
    (folder / "a-folder").mkdir()
    files.paths["folder"] = str(folder / "a-folder")
    files.paths["folder-slash"] = str(folder / "a-folder") + "/"
    loop = folder / "loop"
    loop.symlink_to(loop)
    files.paths["loop"] = str(loop)
    dangling = folder / "dangling.yaml"
    dangling.symlink_to(folder / "nowhere.yaml")
    files.paths["dangling"] = str(dangling)
    files.paths["missing"] = str(folder / "missing.yaml")
    files.paths["missing-folder-file"] = str(folder / "no" / "such" / "file.json")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(folder / "sock"))
    files._socket = sock
    files.paths["socket"] = str(folder / "sock")
    files.paths["dev-zero"] = "/dev/zero"
    files.paths["dev-urandom"] = "/dev/urandom"
    files.paths["dev-null"] = "/dev/null"
    unreadable = _unreadable_path()
    if unreadable:
        files.paths["unreadable"] = unreadable
    return files


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    found = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            try:
                info = path.lstat()
            except OSError:
                continue
            found[str(path.relative_to(folder))] = (info.st_size, info.st_mtime_ns)
    return found


def clean_folder(folder: Path) -> None:
    for child in folder.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                child.unlink()


def restore_fuzz_files(files: FuzzFiles, reference: dict) -> tuple[FuzzFiles, dict]:
    """A case may legitimately overwrite an input it was given as its output: write the files again if so."""
    if snapshot(files.folder) != reference:
        files.close()
        shutil.rmtree(files.folder, ignore_errors=True)
        files = make_fuzz_files(files.folder)
        reference = snapshot(files.folder)
    return files, reference
