"""A reduced quality check (slow tier): the default training configs still learn, so a learning regression
fails CI. The full check, 10 seeds per task and the peers' rows, is ``python -m omni_sfp.bench --quality``
(docs/benchmarks.md, "Learning quality")."""

import pytest

from omni_sfp.bench.quality import CARTPOLE_SOLVED, LQR_SOLVED_RATIO, run_quality, select_configs


@pytest.mark.slow
def test_default_configs_solve_cartpole_and_lqr(tmp_path):
    """Two Cartpole seeds balance (deterministic return >= 475 of 500) and one LQR60x8 seed ends within 1.25x of
    the Riccati optimum, with each task's own config, as ``python -m omni_sfp.train`` runs it."""
    configs = select_configs("sfp-fp32")
    cartpole = run_quality(tasks=["Cartpole"], seeds=[0, 1], device="cpu", runs_dir=tmp_path, iterations=None,
                           log=print, configs=configs, workers=2)["Cartpole"]
    finals = cartpole["configs"]["single pass, fp32"]["final_returns"]
    assert len(finals) == 2 and min(finals) >= CARTPOLE_SOLVED, finals
    lqr = run_quality(tasks=["LQR60x8"], seeds=[0], device="cpu", runs_dir=tmp_path, iterations=None,
                      log=print, configs=configs)["LQR60x8"]
    (final,) = lqr["configs"]["single pass, fp32"]["final_returns"]
    assert final >= LQR_SOLVED_RATIO * lqr["optimal_return"], (final, lqr["optimal_return"])
