"""The env-overhead mode: the product's rollout rate against the bare env's step rate, and its CLI."""

from __future__ import annotations

import math

import pytest

from omni_sfp.bench.envrate import markdown, measure_env_overhead

SMALL = ["num_envs=4", "train.ppo.rollouts=4", "train.ppo.mini_batches=1"]


@pytest.mark.parametrize("task", ["gym:Pendulum-v1", "Cartpole"])
def test_both_rates_are_measured_and_the_overhead_is_their_difference(task):
    summary = measure_env_overhead([f"task={task}", *SMALL], repetitions=2, rollouts=2)
    assert len(summary["bare_sps"]) == len(summary["rollout_sps"]) == 2
    assert all(rate > 0 for rate in summary["bare_sps"] + summary["rollout_sps"])
    assert summary["steps_per_repetition"] == 8 and summary["num_envs"] == 4
    assert summary["ratio"] == pytest.approx(summary["rollout_median"] / summary["bare_median"])
    expected = 1e6 * (1 / summary["rollout_median"] - 1 / summary["bare_median"])
    assert math.isclose(summary["overhead_us_per_env_step"], expected)
    low, high = summary["ratio_range"]
    assert low <= min(summary["ratio_per_repetition"]) and max(summary["ratio_per_repetition"]) <= high
    assert f"`{task}`" in markdown(summary)


@pytest.mark.parametrize(
    "args, expected",
    [
        (["env-overhead", "--seeds", "3"], "unrecognized arguments: --seeds 3"),
        (["env-overhead", "--units", "8"], "unrecognized arguments: --units 8"),
        (["env-overhead", "--train-args", "task=Cartpol"], "unknown task 'Cartpol'"),
    ],
)
def test_env_overhead_errors_are_one_line(args, expected, capsys):
    from omni_sfp.bench.__main__ import main

    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and expected in err and err.count("\n") == 1
