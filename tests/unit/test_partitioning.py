import pytest

from sinks.partitioning import default_partition, murmur2


# Vectors from Kafka's own UtilsTest.testMurmur2.
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("21", -973932308),
        ("foobar", -790332482),
        ("a-little-bit-long-string", -985981536),
        ("a-little-bit-longer-string", -1486304829),
        ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        ("abc", 479470107),
    ],
)
def test_murmur2_matches_kafka(text: str, expected: int) -> None:
    assert murmur2(text.encode()) == expected


def test_partition_is_in_range_and_stable() -> None:
    for n in range(200):
        key = f'["eu",{n}]'.encode()
        p = default_partition(key, 7)
        assert 0 <= p < 7
        assert p == default_partition(key, 7)
