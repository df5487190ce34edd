"""EngineConfig's checks of its settings."""
import pytest

from gpu.config import EngineConfig


@pytest.mark.parametrize("name", ["share_every", "small_share_every", "share_capacity"])
@pytest.mark.parametrize("value", [0, -3, 2.5])
def test_a_setting_that_must_be_positive_is_refused_by_name(name, value):
    with pytest.raises(ValueError, match=f"EngineConfig.{name} must be a positive integer"):
        EngineConfig(**{name: value})


def test_small_phases_share_more_often_than_the_general_launches_by_default():
    config = EngineConfig()
    assert 1 <= config.small_share_every < config.share_every


def test_tiny_shares_at_every_step_in_both_kinds_of_phase():
    tiny = EngineConfig.tiny()
    assert tiny.share_every == tiny.small_share_every == 1


def test_tiny_bounds_the_search_of_intersecting_queries_to_one_block_per_multiprocessor():
    assert EngineConfig.tiny().intersecting_blocks_per_sm == 1
    assert EngineConfig().intersecting_blocks_per_sm > 1


@pytest.mark.parametrize("name", ["small_phase_edges", "leaf_count_degree", "leaf_cache_bytes",
                                  "intersecting_blocks_per_sm"])
@pytest.mark.parametrize("value", [-1, 2.5])
def test_a_setting_that_must_not_be_negative_is_refused_by_name(name, value):
    with pytest.raises(ValueError,
                       match=f"EngineConfig.{name} must be a non-negative integer"):
        EngineConfig(**{name: value})
    assert getattr(EngineConfig(**{name: 0}), name) == 0
