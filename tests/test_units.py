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


@pytest.mark.parametrize("value", [True, False, -1, float("inf"), float("nan"), -4096.0, "inf", "nan"])
def test_parse_count_rejects_non_counts(value):
    """A boolean is not a count (True was returned as is), nor is a negative or non-finite number."""
    with pytest.raises(UnitError):
        parse_count(value)


def test_parse_count_takes_whole_floats():
    assert parse_count(4096.0) == 4096
    with pytest.raises(UnitError, match="whole"):
        parse_count(4096.5)


@pytest.mark.parametrize("text", ["0.5,nan", "inf", "-inf,0.6", "1e999"])
def test_parse_float_list_rejects_non_finite(text):
    with pytest.raises(UnitError, match="finite"):
        parse_float_list(text, "acceptance rate")


def test_parse_int_range_refuses_huge_ranges_before_building_them():
    """'0..100000000' built a list of 1e8 ints (a MemoryError after a long wait in sweep)."""
    with pytest.raises(UnitError, match="100000001 values"):
        parse_int_range("0..100000000")
    assert len(parse_int_range("0..99", max_values=100)) == 100
    with pytest.raises(UnitError, match="at most 100"):
        parse_int_range("0..100", max_values=100)
    with pytest.raises(UnitError, match="at most 3"):
        parse_int_range("1,2,3,4", max_values=3)
