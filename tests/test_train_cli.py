"""omni_sfp.train's own decisions: seed=-1 draws a seed that the run folder keeps, and only bad input (not
every RuntimeError) is exit code 2."""

from __future__ import annotations

import re

import pytest
import torch
from omegaconf import OmegaConf

import omni_sfp.run.runner as runner_module
from omni_sfp.config import schema
from omni_sfp.run.compose import ConfigError, load_config
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


def test_a_runtime_error_while_building_is_not_reported_as_bad_input(monkeypatch):
    def out_of_memory(*args, **kwargs):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(runner_module, "make_env", out_of_memory)
    with pytest.raises(RuntimeError, match="out of memory"):
        main(SMALL)


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
