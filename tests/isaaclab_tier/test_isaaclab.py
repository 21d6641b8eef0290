"""omni_sfp's Isaac Lab path against the real Isaac Lab 3.0.0 (kit-less, Newton physics on the CPU): ids,
configs, device, launch, multi-agent refusal, close, upstream settings and a training run through the CLI.

Run by .ci/isaaclab_tier.sh in its own Python 3.12 venv; each test names the defect of the old adapter it
guards against. Building a Cartpole env costs ~20 s here (warp kernels cached after the first, ~2 min).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from omni_sfp.config.schema import config_dir
from omni_sfp.envs import isaaclab, registry
from omni_sfp.envs.registry import UnknownTaskError
from omni_sfp.run.compose import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]
CARTPOLE = "Isaac-Cartpole-Direct"


def run_train(*args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "omni_sfp.train", *args],
        check=False,
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env=os.environ.copy(),
    )


def train_briefly(task: str, tmp_path: Path, *args: str, num_envs: int, iterations: int = 2) -> str:
    """Iterations of 8 steps through the CLI, on the CPU; asserts exit 0 and a full cache; the stdout."""
    result = run_train(
        f"task={task}",
        *args,
        "device=cpu",
        f"num_envs={num_envs}",
        f"max_iterations={iterations}",
        "train.ppo.rollouts=8",
        f"runs_dir={tmp_path / 'runs'}",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "SFP cache hits: 100.0%" in result.stdout
    return result.stdout


def test_the_installed_isaac_lab_is_3_0_0():
    assert isaclab_version() == (3, 0, 0) and isaaclab.kitless()


def isaclab_version():
    return isaaclab.version()


def test_isaac_lab_3_ids_resolve_without_v0_and_contrib_ids_too():
    spec = registry.get_task(CARTPOLE)
    assert (spec.kind, spec.entry_point) == ("isaaclab", isaaclab.ENTRY_POINT)
    assert registry.get_task("IsaacContrib-Velocity-Flat-AnymalC").kind == "isaaclab"  # the old code refused 95 ids
    with pytest.raises(UnknownTaskError) as error:
        registry.get_task("Isaac-Cartpole-Direct-v0")  # the id our docs used
    message = str(error.value)
    assert "did you mean 'Isaac-Cartpole-Direct'" in message and "no -v0 suffix" in message and "\n" not in message


def test_an_unknown_id_is_refused_before_anything_launches(monkeypatch):
    import isaaclab.app

    launched = []
    monkeypatch.setattr(isaaclab.app, "launch_simulation", lambda *a, **k: launched.append(a))
    with pytest.raises(UnknownTaskError, match=r"has no task 'Isaac-Cartpol-Direct'; did you mean"):
        registry.make_env("Isaac-Cartpol-Direct", num_envs=2, device="cpu", seed=0)
    assert launched == []


def test_multi_agent_ids_are_refused_with_one_line(tmp_path):
    with pytest.raises(isaaclab.IsaacLabError, match=r"'Isaac-Pendulum-MARL-Direct' is multi-agent"):
        registry.get_task("Isaac-Pendulum-MARL-Direct")
    with pytest.raises(ConfigError, match=r"is multi-agent \(DirectMARLEnvCfg\) and omni_sfp trains one agent"):
        load_config(["task=Isaac-Pendulum-MARL-Direct"])
    result = run_train("task=Isaac-Pendulum-MARL-Direct", "device=cpu", cwd=tmp_path, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("omni_sfp.train: error: task 'Isaac-Pendulum-MARL-Direct' is multi-agent")
    assert "Traceback" not in result.stderr


def test_device_strings_for_isaac_lab():
    assert isaaclab.device_string(torch.device("cpu")) == "cpu"  # the runner passes a torch.device
    assert isaaclab.device_string(torch.device("cuda", 1)) == "cuda:1"
    assert isaaclab.device_string("cuda") == "cuda:0"


def test_cameras_are_enabled_for_camera_tasks():
    from isaaclab_tasks.utils.parse_cfg import parse_env_cfg

    camera = parse_env_cfg("Isaac-Cartpole-Camera-Direct", device="cpu", num_envs=2)
    plain = parse_env_cfg(CARTPOLE, device="cpu", num_envs=2)
    assert isaaclab.launcher_args(camera, headless=True, device="cpu", launch={})["enable_cameras"] is True
    assert "enable_cameras" not in isaaclab.launcher_args(plain, headless=True, device="cpu", launch={})


def test_a_kit_backend_without_isaac_sim_is_one_error_line_not_a_system_exit():
    # Isaac Lab's Kit launcher logs and raises SystemExit(1) when Isaac Sim is missing (not an Exception)
    with pytest.raises(isaaclab.IsaacLabError, match=r"could not start Isaac Sim \(it exited with 1\)") as error:
        registry.make_env(CARTPOLE, num_envs=2, device="cpu", seed=0, task_cfg={"physics": "isaacsim_physx"})
    assert "\n" not in str(error.value)


def test_a_bad_env_override_is_named():
    with pytest.raises(isaaclab.IsaacLabError, match=r"task.env.scene.no_such_field: the env config of"):
        registry.make_env(CARTPOLE, num_envs=2, device="cpu", seed=0, task_cfg={"scene.no_such_field": 1})


def test_a_real_env_builds_with_a_torch_device_steps_and_closes_once():
    # the old adapter handed the runner's torch.device to Isaac Lab: TypeError at gym.make ("cuda" in device)
    env = registry.make_env(
        CARTPOLE, num_envs=4, device=torch.device("cpu"), seed=1, task_cfg={"episode_length_s": 1.0}
    )
    try:
        assert env.num_envs == 4 and env.device == torch.device("cpu")
        assert env.observation_space.shape == (4,) and env.action_space.shape == (1,)
        unwrapped = env._unwrapped
        assert unwrapped.cfg.seed == 1 and unwrapped.cfg.episode_length_s == 1.0 and unwrapped.cfg.sim.device == "cpu"
        obs, _ = env.reset()
        assert obs.shape == (4, 4) and obs.dtype == torch.float32
        truncated_any = False
        for _ in range(70):  # 1 s episodes at 60 Hz: time-outs come as truncations
            obs, reward, terminated, truncated, _ = env.step(torch.zeros(4, 1))
            assert reward.shape == terminated.shape == truncated.shape == (4, 1)
            truncated_any |= bool(truncated.any())
        assert truncated_any and torch.isfinite(obs).all()
    finally:
        env.close()
    assert unwrapped._is_closed
    env.close()  # idempotent


def test_env_is_closed_at_exit_after_an_error(tmp_path):
    code = textwrap.dedent(
        f"""
        import atexit
        from omni_sfp.envs import registry
        made = {{}}
        # atexit runs last-registered first: this one runs after the adapter's, which make_env registers
        atexit.register(lambda: print("closed at exit:", made["env"]._unwrapped._is_closed, flush=True))
        made["env"] = registry.make_env({CARTPOLE!r}, num_envs=2, device="cpu", seed=0)
        raise RuntimeError("training failed")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        env=os.environ.copy(),
    )
    assert result.returncode == 1 and "training failed" in result.stderr, result.stderr[-2000:]
    assert "closed at exit: True" in result.stdout


def test_isaac_ids_take_their_registered_skrl_config_and_num_envs(capsys):
    cfg = load_config([f"task={CARTPOLE}"])
    ppo, models = cfg.train.ppo, cfg.train.models
    assert cfg.task.env.num_envs == 4096  # CartpoleEnvCfg.scene.num_envs (the old code: 64)
    assert (ppo.rollouts, ppo.learning_epochs, ppo.mini_batches) == (32, 8, 8)
    assert (ppo.learning_rate, ppo.learning_rate_schedule, ppo.desired_kl) == (5e-4, "kl_adaptive", 0.008)
    assert (ppo.discount_factor, ppo.gae_lambda, ppo.rewards_scale) == (0.99, 0.95, 0.1)
    assert (ppo.value_clip, ppo.value_loss_scale, ppo.entropy_loss_scale, ppo.grad_norm_clip) == (0.2, 2.0, 0.0, 1.0)
    assert ppo.time_limit_bootstrap is False and ppo.observation_normalization and ppo.value_normalization
    assert list(models.units) == [32, 32] and models.activation == "elu" and models.separate is False
    assert models.init == "torch"  # skrl's instantiators keep nn.Linear's default init
    assert ppo.bounds_loss_scale == 0.0  # skrl's PPO has no bound loss
    assert ppo.max_learning_rate == 1e-2  # KLAdaptiveLR's default max_lr (the config sets none)
    assert cfg.train.max_iterations == 150  # trainer.timesteps 4800 / rollouts 32
    generic = OmegaConf.load(Path(config_dir()) / "train" / "GenericPPO.yaml")
    taken = [f"train.ppo.{key}" for key in generic.ppo] + ["train.max_iterations"]
    assert all(key in cfg.task.upstream for key in taken), taken  # the generic file's keys: all Isaac Lab's here
    source = "isaaclab_tasks.core.cartpole.agents:skrl_direct_ppo_cfg.yaml"
    assert cfg.task.upstream["train.ppo.rollouts"] == f"32 <- {source}: agent.rollouts"
    out = capsys.readouterr().out
    assert f"[omni_sfp] {CARTPOLE}: " in out and f"train.max_iterations=150  <- {source}: trainer.timesteps" in out


def test_isaac_ant_prints_the_upstream_settings_it_took(capsys):
    cfg = load_config(["task=Isaac-Ant", "num_envs=32"])
    out = capsys.readouterr().out
    assert "[omni_sfp] Isaac-Ant: " in out and "train.ppo.rollouts=" in out
    assert "ant.agents:skrl_manager_ppo_cfg.yaml" in out
    assert cfg.num_envs == 32 and "task.env.num_envs" not in cfg.task.upstream  # the command line wins


def test_isaac_ant_direct_trains_through_the_cli_on_the_newton_ant(tmp_path):
    """Isaac Lab's Ant asset comes from NVIDIA's cloud; newton's ant (conftest: standin_assets) stands in for it.
    Before, this needed ``trimesh`` (the terrain importer), which isaaclab's requirements leave out."""
    out = train_briefly("Isaac-Ant-Direct", tmp_path, num_envs=8)
    assert "[omni_sfp] Isaac-Ant-Direct: " in out  # its registered skrl config's settings


def test_training_through_the_cli(tmp_path):
    result = run_train(
        f"task={CARTPOLE}",
        "device=cpu",
        "num_envs=16",
        "max_iterations=2",
        "train.ppo.rollouts=16",
        f"runs_dir={tmp_path / 'runs'}",
        f"progress_file={tmp_path / 'progress.jsonl'}",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "SFP cache hits: 100.0%" in result.stdout
    assert f"[omni_sfp] {CARTPOLE}: " in result.stdout  # the upstream settings it took, printed at start
    lines = (tmp_path / "progress.jsonl").read_text().splitlines()
    assert len(lines) == 3 and "final_return" in lines[-1]  # two iterations, then the end's verdict
    (config_file,) = (tmp_path / "runs").glob("*/*/config.yaml")
    saved = OmegaConf.load(config_file)
    assert saved.train.ppo.learning_rate == 5e-4 and saved.train.ppo.rollouts == 16 and saved.num_envs == 16
    assert "train.ppo.learning_rate" in saved.task.upstream and "train.ppo.rollouts" not in saved.task.upstream
