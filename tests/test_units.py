import pytest

from gpuprof.errors import UsageError
from gpuprof.units import format_size, parse_size, parse_size_list, size_range


@pytest.mark.parametrize(
    ("text", "expected"),
    [("8", 8), ("1K", 1024), ("64M", 64 << 20), ("1G", 1 << 30), ("4KiB", 4096), ("2kb", 2048)],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["1Q", "", "-1K", "1.5M", "M"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(UsageError, match="invalid size"):
        parse_size(text)


def test_size_range_like_nccl_tests() -> None:
    assert size_range(8, 128, 2) == [8, 16, 32, 64, 128]
    assert size_range(1024, 16 << 20, 4)[-1] == 16 << 20
    assert parse_size_list("1K,1M,64M") == [1024, 1 << 20, 64 << 20]


def test_size_range_rejects_min_above_max() -> None:
    with pytest.raises(UsageError, match="larger than --max-bytes"):
        size_range(1 << 20, 1024, 2)
    with pytest.raises(UsageError, match="factor"):
        size_range(8, 1024, 1)


def test_format_size_is_binary() -> None:
    assert format_size(1024) == "1 KiB"
    assert format_size(1536) == "1.5 KiB"
    assert format_size(64 << 20) == "64 MiB"
    assert format_size(8) == "8 B"
