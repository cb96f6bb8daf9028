"""Write a sweep's grid to a file: CSV or JSON formatted by numpy in bounded chunks, written atomically.

The CSV holds exactly what `csv.writer` over the Python values writes (every value as `str` of its Python scalar:
floats repr-exact, so they parse back bit for bit; booleans as True/False; rows ending in \\r\\n), and the JSON exactly
what `json.dumps(result.to_dict(), indent=1)` writes, but a million points take about a second instead of 15-20: each
value is formatted once where the grid broadcasts it (the step time of a (batch, context, k) serves every alpha) and
the lines are laid out as fixed-width byte matrices, not Python lists.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from ..fileio import open_atomic

# about 12 MB of row matrix per chunk: peak memory stays flat however large the grid
CHUNK_ROWS = 1 << 16
_COMMA, _CR, _LF = ord(","), ord("\r"), ord("\n")


def get_grid_columns(result) -> dict[str, np.ndarray]:
    """The long-format columns of a SweepResult as read-only broadcast views of the grid shape (no copies), in file
    order. Each per-point array spans the leading grid axes (batch, context[, k[, alpha]]): e.g. the target decode
    time is (n_batch, n_ctx), the verify step (n_batch, n_ctx, n_k)."""
    shape = result.speedup.shape

    def lead(values):
        values = np.asarray(values)
        return values[(...,) + (None,) * (len(shape) - values.ndim)]

    b, c, k, a = (np.asarray(v) for v in (result.batch, result.context_tokens, result.k, result.alpha))
    columns = {
        "batch": lead(b), "context_tokens": c[:, None, None], "k": k[:, None], "alpha": a,
        "expected_tokens": result.expected_tokens, "target_decode_time_s": lead(result.target_decode_time_s),
        "draft_step_time_s": lead(result.draft_step_time_s), "verify_step_time_s": lead(result.verify_step_time_s),
        "step_time_s": result.step_time_s, "speedup": result.speedup, "fits_in_memory": lead(result.fits_in_memory),
    }
    return {name: np.broadcast_to(values, shape) for name, values in columns.items()}


def format_values(values: np.ndarray, style: str = "csv") -> np.ndarray:
    """Text of every value as a uint8 array of shape values.shape + (width,), NUL-padded, broadcast like `values`.

    Only the distinct cells are formatted: axes along which `values` is broadcast (stride 0) are cut to length 1
    first. csv: `str` of the Python scalar, exactly what csv.writer writes. json: what the json module writes (the
    same for numbers, true/false, NaN and +-Infinity for non-finite floats).
    """
    compact = values[tuple(slice(0, 1) if stride == 0 else slice(None) for stride in values.strides)]
    if style == "json" and compact.dtype == bool:
        text = np.where(compact, b"true", b"false").ravel()
    else:
        text = np.array(list(map(str, compact.ravel().tolist())), dtype=bytes)
    if style == "json" and compact.dtype.kind == "f" and not np.isfinite(compact).all():
        text = text.astype(f"S{max(text.dtype.itemsize, 9)}")  # room for -Infinity
        flat = compact.ravel()
        text[np.isnan(flat)], text[flat == np.inf], text[flat == -np.inf] = b"NaN", b"Infinity", b"-Infinity"
    width = text.dtype.itemsize
    as_bytes = text.view(np.uint8).reshape(compact.shape + (width,))
    return np.broadcast_to(as_bytes, values.shape + (width,))


def iter_blocks(shape: tuple[int, ...], max_rows: int) -> Iterator[tuple[slice, ...]]:
    """Index tuples over the leading axes of `shape` that cover it in C order, each of at most max_rows points (at
    least one); where one slice along an axis is already larger than max_rows, it splits along the next axis."""
    if len(shape) == 0:
        yield ()
        return
    inner = int(np.prod(shape[1:]))
    if inner <= max_rows or len(shape) == 1:
        step = max(1, max_rows // max(inner, 1))
        for start in range(0, shape[0], step):
            yield (slice(start, min(start + step, shape[0])),)
        return
    for i in range(shape[0]):
        for rest in iter_blocks(shape[1:], max_rows):
            yield (slice(i, i + 1),) + rest


def format_csv_rows(columns: list[np.ndarray]) -> bytes:
    """CSV lines for every point of the (equally shaped) columns, in C order."""
    texts = [format_values(c) for c in columns]
    shape = columns[0].shape
    line = sum(t.shape[-1] for t in texts) + len(texts) + 1  # separators between fields, then \r\n
    rows = np.zeros(shape + (line,), dtype=np.uint8)
    at = 0
    for t in texts:
        width = t.shape[-1]
        rows[..., at:at + width] = t
        rows[..., at + width] = _COMMA
        at += width + 1
    rows[..., at - 1] = _CR  # the last field's comma
    rows[..., at] = _LF
    # field text is NUL-padded to its column's width; dropping the NULs leaves the variable-width CSV
    return rows.tobytes().replace(b"\0", b"")


def iter_csv(result, chunk_rows: int = CHUNK_ROWS) -> Iterator[bytes]:
    """The grid as CSV, header first, in chunks of at most about chunk_rows rows."""
    columns = get_grid_columns(result)
    yield (",".join(columns) + "\r\n").encode()
    values = list(columns.values())
    for block in iter_blocks(values[0].shape, chunk_rows):
        yield format_csv_rows([v[block] for v in values])


def format_json_items(values: np.ndarray) -> bytes:
    """Every value as a list item the way json.dumps(indent=1) lays out a list three levels deep: ",\\n   " + value."""
    text = format_values(values, "json")
    prefix = b",\n   "
    items = np.zeros(values.shape + (len(prefix) + text.shape[-1],), dtype=np.uint8)
    items[..., :len(prefix)] = np.frombuffer(prefix, dtype=np.uint8)
    items[..., len(prefix):] = text
    return items.tobytes().replace(b"\0", b"")


def iter_json(result, chunk_rows: int = CHUNK_ROWS) -> Iterator[bytes]:
    """json.dumps(result.to_dict(), indent=1), byte for byte, in chunks: the grid (the last key, one list per column)
    is streamed column by column instead of built as Python lists."""
    head = json.dumps(result.to_dict(include_grid=False), indent=1)
    yield (head[:-len("\n}")] + ',\n "grid": {').encode()
    for i, (name, values) in enumerate(get_grid_columns(result).items()):
        yield (("," if i else "") + f"\n  {json.dumps(name)}: [").encode()
        for j, block in enumerate(iter_blocks(values.shape, chunk_rows)):
            chunk = format_json_items(values[block])
            yield chunk[1:] if j == 0 else chunk  # no comma before a list's first item
        yield b"\n  ]"
    yield b"\n }\n}"


def write_chunks_atomic(path: str | Path, chunks: Iterable[bytes]) -> Path:
    """Stream chunks through `fileio.open_atomic`: never half-written, never the whole file in memory."""
    path = Path(path)
    with open_atomic(path, "wb") as f:
        for chunk in chunks:
            f.write(chunk)
    return path


def write_grid(result, path: str | Path, fmt: str | None = None) -> Path:
    """Write the full grid to `path` as CSV or JSON (default from the suffix: .json is JSON, anything else CSV)."""
    path = Path(path)
    fmt = fmt or ("json" if path.name.endswith(".json") else "csv")
    if fmt == "csv":
        return write_chunks_atomic(path, iter_csv(result))
    if fmt == "json":
        return write_chunks_atomic(path, iter_json(result))
    raise ValueError(f"unknown grid format {fmt!r}")
