"""The pixel preset at a tiny size: every row runs the same update, and our rows' cache serves every shareable call."""

import pytest

pytest.importorskip("rl_games")

from omni_sfp.bench.pixels import ROWS, PixelWork, format_results, run  # noqa: E402


def test_the_pixel_preset_times_every_row_and_our_cache_hits_every_shareable_call():
    work = PixelWork(num_envs=2, horizon=8, epochs=1, minibatch_size=8)
    results = run(work, 1, log=lambda line: None)
    assert set(results["fp32"]) == set(ROWS)
    assert set(results["mixed"]) == set(ROWS) - {"rl_games network"}  # rl_games' mixed precision is CUDA-only
    for precision in results.values():
        assert precision["omni-sfp"]["hit_rate"] == 1.0
        assert precision["omni-sfp double"]["hit_rate"] != precision["omni-sfp double"]["hit_rate"]  # NaN: off
        assert all(row["median_s"] > 0 for row in precision.values())
    table = format_results(results, work, 1)
    assert "| fp32 | omni-sfp | " in table and "100.0%" in table
