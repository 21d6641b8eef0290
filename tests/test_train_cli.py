"""omni_sfp.train's own decisions: seed=-1 draws a seed that the run folder keeps, only bad input (not
every RuntimeError) is exit code 2, and Hydra's flags as users know them (--help's sections, --cfg job, -m sweeps)
with one-line errors."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from omegaconf import OmegaConf

import omni_sfp.run.runner as runner_module
from omni_sfp.config import schema
from omni_sfp.run.compose import ConfigError, load_config
from omni_sfp.run.sweep import expand
from omni_sfp.train import draw_seed, main

SMALL = [
    "num_envs=16",
    "train.models.units=[8]",
    "train.ppo.rollouts=4",
    "train.ppo.mini_batches=2",
    "train.ppo.learning_epochs=1",
    "max_iterations=1",
]


def test_seed_minus_one_is_replaced_by_a_drawn_seed_and_printed(capsys):
    drawn = set()
    for _ in range(3):
        cfg = load_config(["seed=-1"])
        seed = draw_seed(cfg)
        assert cfg.seed == seed and 0 <= seed <= schema.SEED_MAX
        assert f"seed=-1: drew seed {seed}" in capsys.readouterr().out
        drawn.add(seed)
    assert len(drawn) > 1  # three draws from 2**31 seeds: equal with probability < 1e-9


def test_a_given_seed_is_kept():
    cfg = load_config(["seed=7"])
    assert draw_seed(cfg) is None and cfg.seed == 7


@pytest.mark.slow
def test_the_run_folder_keeps_the_drawn_seed(tmp_path, capsys):
    assert main([*SMALL, "seed=-1", f"runs_dir={tmp_path}"]) == 0
    printed = int(re.search(r"drew seed (\d+)", capsys.readouterr().out).group(1))
    (run,) = (tmp_path / "Cartpole").iterdir()
    assert OmegaConf.load(run / "config.yaml").seed == printed


def test_a_runtime_error_while_building_is_not_reported_as_bad_input(monkeypatch, tmp_path):
    def out_of_memory(*args, **kwargs):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(runner_module, "make_env", out_of_memory)
    with pytest.raises(RuntimeError, match="out of memory"):
        main([*SMALL, f"runs_dir={tmp_path}"])  # its run folder is made before the env: not in the checkout's runs/


def test_a_cuda_device_this_machine_lacks_is_bad_input(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"device='cuda:1': CUDA is not available on this machine"):
        load_config(["device=cuda:1"])
    assert main([*SMALL, "device=cuda"]) == 2
    assert "CUDA is not available" in capsys.readouterr().err


def test_a_gpu_index_beyond_the_machines_is_bad_input(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    load_config(["device=cuda:1"])
    with pytest.raises(ConfigError, match=r"device='cuda:2': this machine has 2 GPU\(s\) \(cuda:0 to cuda:1\)"):
        load_config(["device=cuda:2"])


# --- as in a Hydra app: --help's sections, --cfg job, and -m sweeps (omni_sfp/run/sweep.py) ---

ROOT = Path(__file__).resolve().parent.parent
TINY = [*SMALL[:-1], "max_iterations=2"]  # SMALL with two iterations: a job of a sweep


def one_error_line(err: str) -> str:
    err = err.strip()
    assert "\n" not in err and "Traceback" not in err and err.startswith("omni_sfp.train: error:"), err
    return err


def test_help_lists_the_config_groups_tasks_and_flags_without_importing_torch():
    script = (
        "import sys\n"
        "from omni_sfp.train import main\n"
        "code = main(['--help'])\n"
        "print('IMPORTED', sorted(m for m in ('torch', 'skrl', 'hydra', 'omegaconf') if m in sys.modules))\n"
        "sys.exit(code)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("``python -m omni_sfp.train [key=value ...]``")
    assert "== Config groups ==" in out and "== Tasks ==" in out and "== Flags ==" in out
    assert re.search(r"^task: Cartpole, CartpolePositions, ConstantCost, .*LQR60x8", out, re.M)
    assert re.search(r"^train: .*CartpolePPO, .*LQR60x8PPO", out, re.M)
    assert (
        "Cartpole, CartpolePositions, ConstantCost, LQR60x8" in out and "gym:<Id>" in out and "gym:<module>:<Id>" in out
    )
    assert "--cfg job [--resolve]" in out and "-m, --multirun" in out and "-h, --help" in out
    assert "== Isaac Lab presets ==" in out and "presets=NAME[,NAME]" in out and "physics=NAME" in out
    assert "renderer=NAME" in out and "Add task=<Isaac Lab id> to --help for that task's names." in out
    assert out.strip().splitlines()[-2].startswith("Every task")  # the last line of --help
    assert "IMPORTED []" in out  # neither torch nor skrl (nor even Hydra): --help stays instant


@pytest.mark.parametrize("flag", ["--cfg", "-c"])
def test_cfg_job_prints_the_composed_config_and_builds_nothing(tmp_path, monkeypatch, capsys, flag):
    monkeypatch.chdir(tmp_path)  # the default runs_dir (runs/) would be here
    overrides = ["task=ConstantCost", "seed=3", "num_envs=8"]
    assert main([flag, "job", *overrides]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed == OmegaConf.to_container(load_config(overrides))
    assert printed["seed"] == 3 and printed["num_envs"] == 8 and printed["task"]["name"] == "ConstantCost"
    assert printed["task_name"] == "${task.name}"  # not resolved without --resolve
    assert main(["--cfg", "all", "--resolve", *overrides]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["task_name"] == "ConstantCost"
    assert list(tmp_path.iterdir()) == []  # no run folder, no Hydra output folder


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--cfg", "hydra"], "no Hydra runtime config"),
        (["--cfg"], "--cfg takes job"),
        (["--cfg", "yaml"], "got 'yaml'"),
        (["--cfg", "job", "seed=abc"], "seed='abc'"),
        (["--cfg", "job", "seed=0,1"], "needs -m"),
        (["--resolve"], "--resolve goes with --cfg job"),
        (["-m", "--cfg", "job"], "one at a time"),
        (["--bogus"], "unknown option '--bogus'"),
        (["seed=0,1"], "needs -m (--multirun)"),
        (["seed=range(0,3)"], "needs -m (--multirun)"),
        (["-m", "seed=[0"], "seed=[0:"),
        (["-m", "seed=interval(0,1)"], "interval(...)"),
        (["presets=dict_box,rgb"], "presets=dict_box,rgb: Isaac Lab's selector tokens"),  # a list, no sweep
        (["physics=newton_mjwarp"], "task 'Cartpole' is not an Isaac Lab task (embedded)"),
    ],
)
def test_misused_flags_and_sweeps_are_one_line_with_exit_code_2(args, expected, capsys):
    assert main(args) == 2
    assert expected in one_error_line(capsys.readouterr().err)


def test_a_sweep_expands_to_the_cartesian_product_first_key_slowest():
    jobs = expand(["seed=0,1,2", "train.sfp.enabled=true,false", "max_iterations=2"])
    assert [job.overrides for job in jobs] == [
        [f"seed={seed}", f"train.sfp.enabled={enabled}", "max_iterations=2"]
        for seed in (0, 1, 2)
        for enabled in (True, False)
    ]
    assert jobs[1].name() == "seed=0 train.sfp.enabled=False"  # the sweep's choices, not the fixed overrides
    assert [job.overrides for job in expand(["task=Cartpole,gym:Pendulum-v1", "seed=range(1,3)"])] == [
        ["task=Cartpole", "seed=1"],
        ["task=Cartpole", "seed=2"],
        ["task=gym:Pendulum-v1", "seed=1"],  # as typed: compose.route_task reads the name
        ["task=gym:Pendulum-v1", "seed=2"],
    ]
    assert [job.overrides for job in expand(["task=glob(C*)"])] == [
        ["task=Cartpole"],
        ["task=CartpolePositions"],
        ["task=ConstantCost"],
    ]
    assert [job.overrides for job in expand(["seed=0,1", "seed=5"])] == [["seed=5"]]  # Hydra's: the last value wins
    assert [job.overrides for job in expand(["seed=5"])] == [["seed=5"]]  # -m without a sweep: one job


def test_multirun_runs_each_job_into_its_own_run_folder_and_sums_up(tmp_path, capsys):
    assert main(["-m", "seed=0,1", *TINY, f"runs_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    runs = sorted((tmp_path / "Cartpole").iterdir())
    assert len(runs) == 2  # two jobs in the same second still get a folder each
    assert {OmegaConf.load(run / "config.yaml").seed for run in runs} == {0, 1}
    assert "[omni_sfp] multirun job 1/2: seed=0 " in out and "[omni_sfp] multirun job 2/2: seed=1 " in out
    assert len(re.findall(r"^Training time: [\d.]+ s \| SPS: \d+ \| SFP cache hits: [\d.]+%$", out, re.M)) == 2
    assert "[omni_sfp] multirun: 2 of 2 jobs ran" in out
    table = out[out.index("[omni_sfp] multirun: 2 of 2") :].splitlines()[1:]
    assert table[0].split() == [
        "#",
        "overrides",
        "final",
        "return",
        "time",
        "(s)",
        "cache",
        "hits",
        "exit",
        "run",
        "folder",
    ]
    for number, seed in ((1, 0), (2, 1)):
        cells = table[number].split()
        run = next(run for run in runs if OmegaConf.load(run / "config.yaml").seed == seed)
        assert cells[:2] == [str(number), f"seed={seed}"] and cells[5:] == ["0", str(run)]
        float(cells[2]), float(cells[3])  # final return, training time
        assert cells[4].endswith("%")

    # each job of a sweep may play (test=true), here each run folder's checkpoint
    assert main(["-m", "test=true", f"checkpoint={runs[0]},{runs[1]}", *TINY]) == 0
    out = capsys.readouterr().out
    assert len(re.findall(r"^Test: Cartpole \| checkpoint .* mean return \(deterministic\)", out, re.M)) == 2
    assert "[omni_sfp] multirun: 2 of 2 jobs ran" in out
    assert len(list((tmp_path / "Cartpole").iterdir())) == 2  # playing makes no run folder


def test_a_bad_value_in_any_job_stops_the_sweep_before_any_job_runs(tmp_path, capsys):
    args = ["-m", "num_envs=4,0", *[o for o in TINY if not o.startswith("num_envs=")], f"runs_dir={tmp_path / 'runs'}"]
    assert main(args) == 2
    captured = capsys.readouterr()
    err = one_error_line(captured.err)
    assert "multirun job 2/2 (num_envs=0)" in err and "num_envs=0: must be >= 1" in err
    assert "multirun job 1/2" not in captured.out  # not even the first job started
    assert not (tmp_path / "runs").exists()


def test_multirun_under_torchrun_is_refused(monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["-m", "seed=0,1"]) == 2
    assert "torchrun" in one_error_line(capsys.readouterr().err)


@pytest.mark.slow
def test_a_signal_during_a_job_stops_the_sweep_with_its_exit_code(tmp_path):
    progress_file = tmp_path / "progress.jsonl"
    process = subprocess.Popen(
        [sys.executable, "-m", "omni_sfp.train", "-m", "seed=0,1,2", *SMALL[:-1], "max_iterations=100000"]
        + ["train.checkpoint_interval=0", f"runs_dir={tmp_path}", f"progress_file={progress_file}"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
    )
    try:
        deadline = time.monotonic() + 120
        while not (progress_file.is_file() and len(progress_file.read_text().splitlines()) >= 2):
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 143, stderr
    assert "Traceback" not in stderr and "stopped by SIGTERM" in stderr
    (run,) = (tmp_path / "Cartpole").iterdir()  # jobs 2 and 3 never started
    assert (run / "checkpoints" / "last.pt").is_file()
    assert "multirun job 2/3" not in stdout
    assert "[omni_sfp] multirun: 1 of 3 jobs ran; jobs 2-3 were not started" in stdout
    row = stdout.strip().splitlines()[-1].split()
    assert row[:2] == ["1", "seed=0"] and row[-2:] == ["143", str(run)]
