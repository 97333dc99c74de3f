from __future__ import annotations

import pytest

from policies.segments import (
    MAX_CAP,
    MAX_SEGMENTS,
    MAX_TAGS,
    OTHER,
    UNSET,
    assign,
    check_cap,
    check_segments,
    check_tags,
    length_bucket,
    segment_key,
    segment_values,
)


@pytest.mark.parametrize(("chars", "bucket"), [
    (0, "<256"), (255, "<256"), (256, "<1k"), (1023, "<1k"), (1024, "<4k"), (4095, "<4k"), (4096, "<16k"),
    (16383, "<16k"), (16384, "16k+"), (10**7, "16k+"),
])
def test_the_length_bucket_is_read_from_a_count_of_characters(chars: int, bucket: str) -> None:
    assert length_bucket(chars) == bucket


def test_an_exchange_falls_in_one_value_per_segment_in_the_trials_order() -> None:
    values = segment_values(["tag:tier", "route", "model", "gateway", "length", "tag:absent"], route="/chat",
                            model="gpt-4o", gateway="gw", tags={"tier": "reasoning"}, prompt_chars=300)
    assert values == (("tag:tier", "reasoning"), ("route", "/chat"), ("model", "gpt-4o"), ("gateway", "gw"),
                      ("length", "<1k"), ("tag:absent", UNSET))
    assert segment_key("tag:tier", "reasoning") == "tag:tier=reasoning"


def test_values_beyond_the_cap_are_pooled_into_other_once() -> None:
    keys, new = assign([("route", "/a"), ("tag:t", "x")], set(), 1)
    assert keys == ("route=/a", OTHER)
    assert new == (("route=/a", "route", "/a"),)
    keys, new = assign([("route", "/a"), ("tag:t", "y")], {"route=/a"}, 1)
    assert keys == ("route=/a", OTHER) and new == ()
    keys, new = assign([("route", "/b"), ("tag:t", "y")], {"route=/a"}, 1)
    assert keys == (OTHER,) and new == ()


def test_ten_thousand_distinct_values_track_at_most_the_cap() -> None:
    tracked: set[str] = set()
    pooled = 0
    for i in range(10_000):
        keys, new = assign([("tag:user", f"u{i}")], tracked, 16)
        tracked.update(k for k, _, _ in new)
        pooled += OTHER in keys
    assert len(tracked) == 16
    assert pooled == 10_000 - 16


def test_segment_lists_are_checked_with_the_bad_index_named() -> None:
    assert check_segments(["route", "model", "gateway", "length", "tag:tier"]) is None
    index, message = check_segments(["route", "prompt"]) or (None, "")
    assert index == 1 and "unknown segment 'prompt'" in message
    assert check_segments(["route", "route"])[0] == 1  # type: ignore[index]
    assert check_segments(["tag:"])[0] == 0  # type: ignore[index]
    assert check_segments(["tag: tier"])[0] == 0  # type: ignore[index]
    assert check_segments([f"tag:t{i}" for i in range(MAX_SEGMENTS + 1)])[0] == -1  # type: ignore[index]


def test_the_cap_and_tags_are_bounded() -> None:
    assert check_cap(1) is None and check_cap(MAX_CAP) is None
    assert check_cap(0) is not None and check_cap(MAX_CAP + 1) is not None
    assert check_tags({"tier": "reasoning"}) is None
    assert check_tags({f"k{i}": "v" for i in range(MAX_TAGS + 1)}) is not None
    assert check_tags({"k": "v" * 129}) is not None
    assert check_tags({"": "v"}) is not None
