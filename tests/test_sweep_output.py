"""The sweep's grid files: the numpy-formatted CSV and JSON hold exactly the numbers of the in-memory result.

The references are the writers these replace (csv.writer over Python lists, json.dumps of to_dict()), so the files are
byte for byte what they were, and parsing them back gives every float bit for bit.
"""

import csv
import dataclasses
import io
import json
import os

import numpy as np
import pytest

from rooflinesim.cli import main
from rooflinesim.pricing.gridio import format_values, iter_blocks, iter_csv, iter_json, write_chunks_atomic, write_grid
from rooflinesim.pricing.sweep import sweep

COLUMNS = ["batch", "context_tokens", "k", "alpha", "expected_tokens", "target_decode_time_s", "draft_step_time_s",
           "verify_step_time_s", "step_time_s", "speedup", "fits_in_memory"]
# chunk sizes that split inside one batch (3 < 2 x 5 x 3), across batches (45) and not at all
CHUNKS = [1, 3, 7, 45, 10_000]


@pytest.fixture(scope="module")
def result():
    # at 128k the KV cache of 64 sequences outgrows an A100, one sequence of 1000 tokens fits: both fits values
    return sweep(hw="a100", model="llama-3.1-8b", draft="llama-3.2-1b", batch=[1, 3, 17, 64], ctx=[1000, 131072],
                 k=[0, 1, 4, 7, 16], alpha=[0.5, 0.7, 1 / 3])


@pytest.fixture(scope="module")
def odd_result(result):
    """The same grid with speedups no sweep produces but a writer must survive: non-finite, subnormal, huge, tiny,
    negative zero (repr switches to exponent notation below 1e-4 and from 1e16)."""
    specials = [np.nan, np.inf, -np.inf, 5e-324, 1e16, 9999999999999998.0, 1e-5, 1e-4, -0.0, 0.1 + 0.2, 1e308]
    speedup = np.array(result.speedup)
    speedup.flat[:len(specials)] = specials
    return dataclasses.replace(result, speedup=speedup)


def reference_csv(result) -> str:
    """The writer this replaces: csv.writer over Python lists of every column."""
    rows = result.to_columns()
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(rows.keys())
    writer.writerows(zip(*(v.tolist() for v in rows.values())))
    return out.getvalue()


def parse_csv(text: str) -> dict[str, list[str]]:
    header, *rows = list(csv.reader(io.StringIO(text)))
    return {name: [row[i] for row in rows] for i, name in enumerate(header)}


@pytest.mark.parametrize("which", ["result", "odd_result"])
def test_csv_is_byte_identical_to_csv_writer(which, request):
    res = request.getfixturevalue(which)
    expected = reference_csv(res)
    assert res.to_csv() == expected
    for chunk_rows in CHUNKS:
        assert b"".join(iter_csv(res, chunk_rows)).decode() == expected, chunk_rows


@pytest.mark.parametrize("which", ["result", "odd_result"])
def test_csv_parses_back_to_the_in_memory_grid_exactly(which, request):
    res = request.getfixturevalue(which)
    parsed = parse_csv(res.to_csv())
    assert list(parsed) == COLUMNS
    rows = res.to_columns()
    assert len(parsed["speedup"]) == res.n_points == 4 * 2 * 5 * 3
    for name in ("batch", "context_tokens", "k"):
        assert [int(x) for x in parsed[name]] == rows[name].tolist()
    for name in COLUMNS[3:-1]:
        back = np.array([float(x) for x in parsed[name]])
        # bit for bit, NaN included (array_equal with equal_nan would also accept a different NaN payload)
        assert back.tobytes() == rows[name].astype(np.float64).tobytes(), name
    assert set(parsed["fits_in_memory"]) == {"True", "False"}
    assert [x == "True" for x in parsed["fits_in_memory"]] == rows["fits_in_memory"].tolist()


@pytest.mark.parametrize("which", ["result", "odd_result"])
def test_json_is_byte_identical_to_json_dumps_and_parses_back(which, request):
    res = request.getfixturevalue(which)
    expected = json.dumps(res.to_dict(), indent=1)
    assert res.to_json() == expected
    for chunk_rows in CHUNKS:
        assert b"".join(iter_json(res, chunk_rows)).decode() == expected, chunk_rows
    grid = json.loads(res.to_json())["grid"]
    assert list(grid) == COLUMNS
    for name, values in res.to_columns().items():
        if values.dtype.kind == "f":
            assert np.array(grid[name], dtype=np.float64).tobytes() == values.tobytes(), name
        else:
            assert grid[name] == values.tolist(), name
    assert res.to_json(include_grid=False) == json.dumps(res.to_dict(include_grid=False), indent=1)


def test_values_are_formatted_once_per_distinct_cell():
    """A column broadcast along an axis is formatted once and broadcast back: the text never costs more than the
    distinct values."""
    step = np.broadcast_to(np.array([[0.25, 1e-7]])[:, :, None], (1000, 2, 30))
    text = format_values(step)
    assert text.shape == (1000, 2, 30, 5) and text.strides[0] == 0 and text.strides[2] == 0
    assert bytes(text[999, 1, 29]) == b"1e-07" and bytes(text[0, 0, 0]) == b"0.25\0"
    flags = format_values(np.array([True, False]), "json")
    assert [bytes(t).rstrip(b"\0") for t in flags] == [b"true", b"false"]


@pytest.mark.parametrize("shape", [(4, 2, 5, 3), (1, 1, 1, 1), (2, 1, 7, 1), (3, 4)])
@pytest.mark.parametrize("max_rows", [1, 2, 5, 6, 29, 120, 10_000])
def test_blocks_cover_the_grid_once_in_c_order_within_the_limit(shape, max_rows):
    index = np.arange(int(np.prod(shape))).reshape(shape)
    blocks = [index[block] for block in iter_blocks(shape, max_rows)]
    assert np.concatenate([b.ravel() for b in blocks]).tolist() == list(range(index.size))
    assert all(b.ndim == len(shape) for b in blocks)  # slices, not integer indices: the grid stays 4-d
    assert max(b.size for b in blocks) <= max_rows


def test_cli_writes_the_api_grid_to_csv_and_json_atomically(tmp_path, capsys):
    args = ["--hw", "h100", "--draft", "llama-3.2-1b", "--batch", "1,5,64", "--ctx", "1k,32k", "--k", "0..5",
            "--alpha", "0.6,0.85"]
    res = sweep(hw="h100", draft="llama-3.2-1b", batch=[1, 5, 64], ctx=[1024, 32768], k=range(6), alpha=[0.6, 0.85])
    grid_csv, grid_json, grid_other = tmp_path / "grid.csv", tmp_path / "grid.json", tmp_path / "grid.out"
    grid_csv.write_text("an older grid\n")
    assert main(["sweep", *args, "-o", str(grid_csv)]) == 0
    assert main(["sweep", *args, "-o", str(grid_json)]) == 0
    assert main(["sweep", *args, "--format", "json", "-o", str(grid_other)]) == 0
    capsys.readouterr()
    assert grid_csv.read_bytes() == reference_csv(res).encode()  # replaced, not appended to
    assert grid_json.read_text() == grid_other.read_text() == res.to_json()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.csv", "grid.json", "grid.out"]  # no temporaries
    umask = os.umask(0)
    os.umask(umask)
    assert grid_csv.stat().st_mode & 0o777 == 0o666 & ~umask


def test_an_interrupted_write_leaves_the_previous_file(tmp_path):
    target = tmp_path / "grid.csv"
    target.write_bytes(b"previous\n")

    def chunks():
        yield b"half a "
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_chunks_atomic(target, chunks())
    assert target.read_bytes() == b"previous\n"
    assert [p.name for p in tmp_path.iterdir()] == ["grid.csv"]


def test_write_grid_refuses_an_unknown_format(tmp_path, result):
    with pytest.raises(ValueError, match="xml"):
        write_grid(result, tmp_path / "grid.xml", "xml")
