"""A reduced quality check (slow tier): the default Cartpole and LQR60x8 training configs still learn, so a
learning regression fails CI. The full check, 10 seeds per task and the peers' rows, is ``python -m
omni_sfp.bench quality`` (docs/benchmarks.md, "Learning quality").

On 2026-12-03 (AMD EPYC, one thread per run) the defaults gave Cartpole 490.1-499.4 over seeds 0-19 (solved is
475) and LQR60x8 1.103-1.161x the Riccati optimum's cost over seeds 0-9 (solved is 1.25x). Which seed ends where depends on
the CPU's floating-point summation order, so the thresholds here are the regressions, not the levels: Cartpole
below 450 (an untrained policy gets ~20) and LQR60x8 above 1.25x (an untrained one costs several times the
optimum) fail.
"""

import pytest

from omni_sfp.bench.quality import run_quality, select_configs

REGRESSION_RATIO = 1.25  # cost over the Riccati optimum's that counts as a learning regression
CARTPOLE_REGRESSION = 450.0  # deterministic return (of 500) below which Cartpole counts as a regression


def train_seed_0(task: str, runs_dir) -> tuple[float, float | None]:
    """The quality mode's single-pass fp32 row, seed 0, the task's default config: final return and optimum."""
    result = run_quality(
        tasks=[task],
        seeds=[0],
        device="cpu",
        runs_dir=runs_dir,
        iterations=None,
        log=print,
        configs=select_configs("sfp-fp32"),
    )[task]
    (final,) = result["configs"]["single pass, fp32"]["final_returns"]
    return final, result["optimal_return"]


@pytest.mark.slow
def test_default_config_brings_lqr_near_the_riccati_optimum(tmp_path):
    final, optimal = train_seed_0("LQR60x8", tmp_path)
    assert final >= REGRESSION_RATIO * optimal, (final, optimal)


@pytest.mark.slow
def test_default_config_balances_the_cartpole(tmp_path):
    final, _ = train_seed_0("Cartpole", tmp_path)
    assert final >= CARTPOLE_REGRESSION, final


@pytest.mark.slow
def test_the_recurrent_default_balances_the_cartpole_without_velocities(tmp_path):
    """CartpolePositions' LSTM (its default config) balances the pole it sees without velocities, and the cache
    serves every shareable call; an MLP of the same widths ends near 100 (docs/benchmarks.md, "Recurrent policies")."""
    result = run_quality(
        tasks=["CartpolePositions"],
        seeds=[0],
        device="cpu",
        runs_dir=tmp_path,
        iterations=None,
        log=print,
        configs=select_configs("sfp-fp32"),
    )["CartpolePositions"]
    row = result["configs"]["single pass, fp32"]
    (final,) = row["final_returns"]
    assert final >= 450.0, final
    assert row["sfp_share_rates"] == [1.0]
