"""A reduced quality check (slow tier): the default LQR60x8 training config still learns, so a learning
regression fails CI. The full check, 10 seeds per task and the peers' rows, is ``python -m omni_sfp.bench
--quality`` (docs/benchmarks.md, "Learning quality").

Cartpole is not asserted here for a given seed: with the default config 1 seed in 10 still ends below 475
(issue 12 is open; seed 7 at 458.0 on 2026-12-03, the other nine at 493-499), and which seeds fail depends
on the CPU's floating-point summation order. Cartpole learning is pinned by
``tests/test_train.py::test_cartpole_learns_to_balance``. LQR60x8 learns smoothly: seeds end at 1.18-1.23x
the Riccati optimum's cost (docs/benchmarks.md); 1.35x leaves room for the spread between seeds and CPUs and
still fails a regression (an untrained policy costs several times the optimum).
"""

import pytest

from omni_sfp.bench.quality import run_quality, select_configs

REGRESSION_RATIO = 1.35  # cost over the Riccati optimum's that counts as a learning regression


@pytest.mark.slow
def test_default_config_brings_lqr_near_the_riccati_optimum(tmp_path):
    configs = select_configs("sfp-fp32")
    lqr = run_quality(
        tasks=["LQR60x8"], seeds=[0], device="cpu", runs_dir=tmp_path, iterations=None, log=print, configs=configs
    )["LQR60x8"]
    (final,) = lqr["configs"]["single pass, fp32"]["final_returns"]
    assert final >= REGRESSION_RATIO * lqr["optimal_return"], (final, lqr["optimal_return"])
