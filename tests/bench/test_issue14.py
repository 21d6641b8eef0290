"""Issue 14's instruments: the GEMM ceiling and its FLOP count, the rollout / learning split, the cold-start
measurement and the prepared GPU script (run on CPU)."""

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from omni_sfp.bench import report
from omni_sfp.bench.ceiling import Product, measure_ceiling, update_flops, update_products
from omni_sfp.bench.coldstart import time_to_first_iteration
from omni_sfp.bench.configs import PRESETS, ROWS, Work, select_rows
from omni_sfp.bench.gpu import main as gpu_main
from omni_sfp.bench.worker import RolloutClock, split

ROOT = Path(__file__).resolve().parents[2]
TINY = Work(
    units=(4, 3), num_envs=5, horizon=2, updates=1, warmup_updates=1, epochs=3, minibatch_size=5, episode_length=4
)  # batch 10: 2 minibatches per epoch


def test_the_update_flops_are_the_floors_gemms_counted_by_hand():
    # layers (in, out): (2, 4), (4, 3), heads (3, 1) and (3, 1); forward per sample 2 * (8 + 12 + 3 + 3) = 52
    forward = 2 * (2 * 4 + 4 * 3 + 3 * 1 + 3 * 1)
    rollout = (TINY.horizon + 1) * TINY.num_envs * forward
    backward = 2 * forward - 2 * (2 * 4)  # weight and input gradients, but none for the observations
    training = TINY.epochs * TINY.batch_size * (forward + backward)
    assert update_flops(TINY, observation_size=2, action_size=1) == rollout + training
    products = update_products(TINY, 2, 1)
    assert Product(5, 2, 4, 3) in products and Product(4, 5, 2, 6) in products  # rollout forward, weight gradient
    assert Product(5, 4, 2, 6) not in products  # the observations' gradient is never computed


def test_the_ceiling_times_those_products_and_divides():
    result = measure_ceiling(TINY, 2, 1, mixed_precision=False, device=torch.device("cpu"))
    assert result["flops_per_update"] == update_flops(TINY, 2, 1) and result["dtype"] == "float32"
    assert result["update_s"] > 0
    assert result["tflops"] == pytest.approx(result["flops_per_update"] / result["update_s"] / 1e12)
    assert measure_ceiling(TINY, 2, 1, mixed_precision=True, device=torch.device("cpu"))["dtype"] == "bfloat16"


def test_rollout_clock_marks_every_horizon_th_step_and_split_pairs_them_with_update_ends():
    class Env:
        device = torch.device("cpu")

        def step(self, actions):
            return actions

    env = Env()
    clock = RolloutClock(env, horizon=3)
    assert [env.step(i) for i in range(7)] == list(range(7)) and len(clock.times) == 2
    updates, rollouts = [10.0, 20.0, 31.0], [8.0, 17.0, 27.0]
    assert split(updates, rollouts, warmup=1) == ([7.0, 7.0], [3.0, 4.0])


def test_tflops_ceiling_fraction_rollout_sps_and_the_cartpole_target_from_hand_made_numbers():
    work = dataclasses.replace(PRESETS["cartpole"][0], updates=2)
    flops = 6e12
    runs = {
        "rlgames-fp32": [
            {
                "seconds": 4.0,
                "precision": "fp32",
                "info": {},
                "flops_per_update": flops,
                "rollout_seconds": [1.0, 1.0],
                "learning_seconds": [1.0, 1.0],
            }
        ],
        "omni-sfp-fp32": [
            {
                "seconds": 3.0,
                "precision": "fp32",
                "info": {},
                "flops_per_update": flops,
                "rollout_seconds": [0.5, 0.75],
                "learning_seconds": [1.0, 0.75],
            }
        ],
        "ceiling-fp32": [{"seconds": 1.0, "precision": "fp32", "info": {}, "flops_per_update": flops}],
    }
    entries = {e["id"]: e for e in report.summarize(select_rows(",".join(runs)), runs, work)}
    assert entries["omni-sfp-fp32"]["tflops"] == pytest.approx(6 / 1.5)  # 6 TFLOP per 1.5 s update
    assert entries["ceiling-fp32"]["tflops"] == pytest.approx(12.0)
    assert entries["omni-sfp-fp32"]["of_ceiling"] == pytest.approx(1.0 / 3)
    steps = work.num_envs * work.horizon
    assert entries["omni-sfp-fp32"]["rollout_sps"]["median"] == pytest.approx(2 * steps / 1.25)
    assert entries["omni-sfp-fp32"]["learning_s"]["median"] == pytest.approx(0.875)
    assert "rollout_sps" not in entries["ceiling-fp32"]
    found = {t["name"]: t for t in report.targets(list(entries.values()), work)}
    target = found["rollout SPS, omni-sfp vs rl_games, fp32 (issue 14)"]
    assert target["value"] == pytest.approx(2.0 / 1.25) and target["met"] is True
    assert select_rows("default", "cartpole") == [
        ROWS[r] for r in ("rlgames-fp32", "omni-sfp-fp32", "bare-ppo-fp32", "floor-fp32", "ceiling-fp32")
    ]


@pytest.mark.slow
def test_cold_start_splits_the_wall_time_at_the_first_iteration():
    result = time_to_first_iteration(
        ["num_envs=8", "train.ppo.rollouts=4", "train.ppo.mini_batches=1", "train.ppo.learning_epochs=1"], threads=1
    )
    assert 0 < result["first_iteration_s"] < result["to_first_iteration_s"]
    assert result["startup_s"] == pytest.approx(result["to_first_iteration_s"] - result["first_iteration_s"])
    assert result["cpu_s"] > 0 or math.isnan(result["cpu_s"])


@pytest.mark.slow
def test_the_gpu_script_runs_every_part_on_cpu_and_writes_its_results(tmp_path):
    out = tmp_path / "out"
    assert gpu_main(["--device", "cpu", "--quick", "--tests", "tests/test_cuda.py", "--out", str(out)]) == 0
    text = (out / "gpu.md").read_text()
    assert text.startswith("# GPU run: no GPU: a CPU dry run of the script (--device cpu)")
    for section in (
        "## Tests",
        "## One update under torch.profiler",
        "## The reference preset",
        "## The isaaclab preset",
    ):
        assert section in text
    assert "skipped" in text  # the CUDA tests skip on a CPU, and the summary says so
    assert text.count("| omni-sfp, SFP (auto), fp32, captured |") == 2 and "| compute floor, fp32 |" in text
    profiled = json.loads((out / "gpu.json").read_text())["One update under torch.profiler (reference preset)"]
    assert [entry["capture"] for entry in profiled] == ["off", "compile"]


def test_the_gpu_script_stops_starting_runs_at_its_budget(tmp_path, capsys):
    args = ["--device", "cpu", "--quick", "--parts", "reference", "--budget", "1", "--out", str(tmp_path)]
    assert gpu_main(args) == 0  # the budget counts from the start: at most the first run starts
    assert "time is up" in capsys.readouterr().err
    assert (tmp_path / "gpu.md").read_text().count("| compute floor, fp32 |") == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_the_gpu_script_refuses_cuda_without_a_gpu_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        gpu_main(["--device", "cuda"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("omni_sfp.bench.gpu: error: --device cuda: CUDA is not available") and err.count("\n") == 1


@pytest.mark.parametrize(
    "args, expected",
    [
        (["coldstart", "--repetitions", "0"], "argument --repetitions: '0' is not a positive integer"),
        (["coldstart", "--device", "cpu"], "unrecognized arguments: --device cpu"),
        (["coldstart", "--units", "8"], "unrecognized arguments: --units 8"),
    ],
)
def test_cold_start_mode_errors_are_one_line(args, expected, capsys):
    from omni_sfp.bench.__main__ import main

    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and expected in err and err.count("\n") == 1
