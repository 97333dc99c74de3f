import pytest

from policies.segment_alpha import segment_alpha


def test_the_trial_level_is_split_evenly_across_the_tracked_values() -> None:
    assert segment_alpha(0.05, 1) == pytest.approx(0.05)
    assert segment_alpha(0.05, 8) == pytest.approx(0.00625)
    assert segment_alpha(0.05, 9) * 9 == pytest.approx(0.05)


@pytest.mark.parametrize(("alpha", "tracked"), [(0.0, 4), (1.0, 4), (0.05, 0), (-0.1, 2)])
def test_levels_and_counts_outside_their_range_are_refused(alpha: float, tracked: int) -> None:
    with pytest.raises(ValueError):
        segment_alpha(alpha, tracked)
