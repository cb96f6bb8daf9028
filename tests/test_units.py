import pytest

from rooflinesim.units import (
    UnitError, format_bytes, format_count, format_seconds, get_dtype_bytes, normalize_dtype, parse_count,
    parse_count_range, parse_float_list, parse_int_range,
)


@pytest.mark.parametrize(
    "text, expected",
    [("4096", 4096), ("4k", 4096), ("32K", 32768), ("128k", 131072), ("1M", 1048576), (" 8k ", 8192), (0, 0)],
)
def test_parse_count(text, expected):
    assert parse_count(text) == expected


@pytest.mark.parametrize("text", ["32q", "", "k", "1.5", "-4k", "4kk", "1e3"])
def test_parse_count_rejects(text):
    with pytest.raises(UnitError):
        parse_count(text)


def test_ranges():
    assert parse_count_range("1..256") == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert parse_count_range("1k..4k") == [1024, 2048, 4096]
    assert parse_count_range("1..6") == [1, 2, 4, 6]
    assert parse_count_range("1,3,8k") == [1, 3, 8192]
    assert parse_int_range("0..3") == [0, 1, 2, 3]
    assert parse_int_range("1,4") == [1, 4]
    assert parse_float_list("0.6, 0.8") == [0.6, 0.8]
    with pytest.raises(UnitError, match="positive"):
        parse_count_range("1..0")
    with pytest.raises(UnitError, match="empty"):
        parse_count_range("4k..1k")
    with pytest.raises(UnitError, match="empty"):
        parse_int_range("3..1")
    with pytest.raises(UnitError):
        parse_float_list("0.6,x")


def test_dtypes():
    assert get_dtype_bytes("bfloat16") == 2
    assert get_dtype_bytes("int4") == 0.5
    assert normalize_dtype("FP8") == "fp8"
    with pytest.raises(UnitError, match="supported"):
        normalize_dtype("fp6")


def test_formatting_is_decimal():
    assert format_bytes(140e9) == "140 GB"
    assert format_seconds(0.0683) == "68.3 ms"
    assert format_count(131072) == "128k"
