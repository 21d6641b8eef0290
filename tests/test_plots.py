"""learning_curve.png: points with markers, gaps where no episode finished, the evaluations."""

import numpy as np

from omni_sfp.run.outputs.plots import learning_curve, series


def test_iterations_without_a_finished_episode_are_gaps():
    steps, values = series([(100, 10.0), (200, None), (300, None), (400, 490.0)])
    np.testing.assert_array_equal(steps, [100, 200, 300, 400])
    assert np.isnan(values[1:3]).all() and values[0] == 10.0 and values[3] == 490.0


def test_the_curve_is_written(tmp_path):
    path = tmp_path / "learning_curve.png"
    learning_curve(
        [(100, 10.0), (200, None), (300, 480.0)], path, title="t", optimal_return=None, evaluations=[(300, 499.0)]
    )
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    empty = tmp_path / "empty.png"
    learning_curve([(100, None)], empty, title="no episode finished yet")
    assert empty.stat().st_size > 0
