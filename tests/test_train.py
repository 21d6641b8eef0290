"""The training command end to end: run folder, summary line, test mode, and one-line errors (exit 2)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from omni_sfp.run.compose import load_config
from omni_sfp.run.runner import Runner
from omni_sfp.train import main

ROOT = Path(__file__).resolve().parent.parent
SMALL = [
    "task=Cartpole",
    "num_envs=64",
    "train.models.units=[32,32]",
    "train.ppo.rollouts=8",
    "train.ppo.mini_batches=2",
    "train.ppo.learning_epochs=2",
]


def cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "omni_sfp.train", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
    )


@pytest.mark.slow
def test_cli_trains_writes_a_complete_run_folder_and_plays_it_back(tmp_path):
    result = cli(*SMALL, "max_iterations=3", "experiment=smoke", f"runs_dir={tmp_path}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    summary = result.stdout.strip().splitlines()[-1]
    match = re.fullmatch(r"Training time: [\d.]+ s \| SPS: \d+ \| SFP cache hits: ([\d.]+)%", summary)
    assert match and float(match.group(1)) >= 95.0
    (run,) = (tmp_path / "Cartpole").iterdir()
    assert run.name.endswith("_smoke")
    names = {p.name for p in run.iterdir()}
    assert {"config.yaml", "progress.jsonl", "learning_curve.png", "checkpoints"} <= names
    assert any(n.startswith("events.out.tfevents") for n in names)
    *lines, end = [json.loads(line) for line in (run / "progress.jsonl").read_text().splitlines()]
    assert [p["iteration"] for p in lines] == [1, 2, 3] and "final_return" in end  # a line per iteration, then the end
    assert {"sps", "mean_return", "sfp_hit_rate", "rollout_s", "update_s"} <= set(lines[0])
    assert (run / "checkpoints" / "last.pt").is_file()

    played = cli(*SMALL, "test=true", f"checkpoint={run}", cwd=tmp_path)
    assert played.returncode == 0, played.stderr
    assert re.search(r"mean return \(deterministic\): -?[\d.]+", played.stdout)


@pytest.mark.parametrize(
    "args, expected",
    [
        (["task=Cartpol"], "Cartpol"),
        (["train.ppo.rollouts=abc"], "train.ppo.rollouts"),
        (["train.sfp.cache_check=sometimes"], "train.sfp.cache_check='sometimes'"),
        (["num_envs=10", "train.ppo.rollouts=3", "train.ppo.mini_batches=4"], "not divisible"),
        (["test=true", "checkpoint=/nonexistent/run"], "/nonexistent/run"),
        (["device=tpu"], "device='tpu'"),
        (["train.models.units=[]"], "train.models.units"),
        (["task=Isaac-Ant-v0"], "Isaac Lab is not installed here"),
        (["task=gym:NoSuchEnv-v9"], "NoSuchEnv-v9"),
    ],
)
def test_bad_input_is_one_line_naming_the_problem_with_exit_code_2(args, expected, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert err.startswith("omni_sfp.train: error:") and expected in err


def test_unreadable_checkpoint_is_refused_by_name(tmp_path, capsys):
    broken = tmp_path / "broken.pt"
    broken.write_bytes(b"not a checkpoint at all")
    assert main([*SMALL, "test=true", f"checkpoint={broken}"]) == 2
    err = capsys.readouterr().err
    assert str(broken) in err and "unreadable" in err


@pytest.mark.slow
def test_cli_misuse_from_a_real_process_exits_2_without_traceback(tmp_path):
    result = cli("task=NoSuchTask", cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "NoSuchTask" in result.stderr


@pytest.mark.slow
def test_cartpole_learns_to_balance(tmp_path):
    """A short end-to-end run: the deterministic policy balances far longer than a random one."""
    cfg = load_config(
        [
            "task=Cartpole",
            "num_envs=256",
            "train.models.units=[64,64]",
            "max_iterations=60",
            "train.ppo.learning_rate=1e-3",
            f"runs_dir={tmp_path}",
        ]
    )
    runner = Runner(cfg, disable_progressbar=True)
    untrained = runner.evaluate(episodes=1)
    summary = runner.train()
    assert summary.final_return > 0.8 * cfg.task.env.max_episode_length > untrained
    assert summary.sfp_hit_rate >= 0.95


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides",
    [
        ["train.mixed_precision=true"],
        ["train.models.separate=true"],
        ["train.sfp.cache_check=off"],
        ["task=LQR60x8", "num_envs=32"],
        ["task=ConstantCost", "num_envs=32"],
        ["task=gym:Pendulum-v1", "num_envs=4"],
        ["train.models.compile=true"],
    ],
)
def test_variants_run(tmp_path, overrides):
    cfg = load_config([*SMALL, "max_iterations=2", f"runs_dir={tmp_path}", *overrides])
    summary = Runner(cfg, disable_progressbar=True).train()
    assert summary.iterations == 2
    if "train.models.separate=true" in overrides or "train.sfp.cache_check=off" in overrides:
        assert summary.sfp_hit_rate is None
    else:
        assert summary.sfp_hit_rate >= 0.95
    assert all(torch.isfinite(torch.tensor(p.sps)) for p in summary.history)


@pytest.mark.slow
@pytest.mark.parametrize("task", ["gym:Hopper-v5", "gym:HalfCheetah-v5", "gym:Ant-v5"])
def test_a_mujoco_task_trains_with_its_own_config(tmp_path, task):
    """The `mujoco` extra's tasks (real Gymnasium MuJoCo envs): `task=gym:<Id>` takes cfg/train/<Id>PPO.yaml,
    trains, and the time-limit bootstrap reads Gymnasium's final observations."""
    pytest.importorskip("mujoco")
    cfg = load_config(
        [f"task={task}", "num_envs=4", "max_iterations=2", "train.ppo.rollouts=8", "train.ppo.mini_batches=1"]
        + [f"runs_dir={tmp_path}", "train.models.compile=false"]
    )
    assert cfg.train.ppo.max_learning_rate == 1e-2 and cfg.train.ppo.bounds_loss_scale == 0  # its file's
    summary = Runner(cfg, disable_progressbar=True).train()
    assert summary.iterations == 2 and summary.sfp_hit_rate >= 0.95 and summary.final_return is not None
