"""omni_sfp.envs.oige and omni_sfp.envs.upstream against OmniIsaacGymEnvs 4.0.0's double (tests/envs/oige_double):
registration, config composition by Hydra's defaults, make_oige_env's launch by the book, upstream settings."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from omni_sfp.envs import oige, registry, upstream
from omni_sfp.envs.oige_wrapper import OmniIsaacGymWrapper
from omni_sfp.run.compose import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]


def test_task_names_are_those_with_a_ppo_config(oige_double):
    # FactoryBase.yaml is a base config, not a task: it has no FactoryBasePPO.yaml
    assert oige.task_names() == [
        "Ant",
        "Cartpole",
        "CartpoleCamera",
        "FactoryTaskNutBoltPick",
        "ShadowHandOpenAI_FF",
        "ShadowHandOpenAI_LSTM",
    ]


def test_oige_tasks_register_through_the_entry_point_and_keep_their_names(oige_double):
    assert "Cartpole" in registry.list_tasks("embedded")
    assert registry.list_tasks("oige") == [
        "Ant",
        "CartpoleCamera",
        "FactoryTaskNutBoltPick",
        "OIGE-Cartpole",
        "ShadowHandOpenAI_FF",
        "ShadowHandOpenAI_LSTM",
    ]
    spec = registry.get_task("Ant")
    assert spec.kind == "oige" and spec.entry_point == "omni_sfp.envs.oige:make_oige_env"
    again = oige.register_oige_tasks()  # idempotent
    assert again == [
        "Ant",
        "OIGE-Cartpole",
        "CartpoleCamera",
        "FactoryTaskNutBoltPick",
        "ShadowHandOpenAI_FF",
        "ShadowHandOpenAI_LSTM",
    ]
    assert registry.get_task("Cartpole").kind == "embedded"


def test_register_without_oige_installed_registers_nothing(monkeypatch, scratch_registry):
    monkeypatch.setattr(oige, "package_dir", lambda: None)
    assert oige.register_oige_tasks() == [] and registry.list_tasks("oige") == []


def test_the_registry_imports_no_adapter():
    # issue 13: registry <-> adapter import cycle. The registry finds the adapters through entry points only.
    source = (ROOT / "omni_sfp" / "envs" / "registry.py").read_text()
    assert "omni_sfp.envs.oige" not in source and "omni_sfp.envs.isaaclab" not in source
    import importlib.metadata

    sources = {e.name: e.value for e in importlib.metadata.entry_points(group=registry.SOURCES_GROUP)}
    assert sources == {
        "oige": "omni_sfp.envs.oige:register_oige_tasks",
        "isaaclab": "omni_sfp.envs.isaaclab:register_source",
    }


def test_compose_applies_hydra_defaults_inheritance(oige_double):
    # OmegaConf.load of task/CartpoleCamera.yaml alone has no sim.dt, physx, resetDist, ... (they come from
    # Cartpole.yaml through `defaults:`)
    cfg = oige.compose("CartpoleCamera", values={"num_envs": 8, "pipeline": "cpu", "sim_device": "cpu"})
    task = cfg["task"]
    assert task["name"] == "CartpoleCamera" and task["env"]["numEnvs"] == 8
    assert task["env"]["resetDist"] == 3.0 and task["env"]["cameraWidth"] == 240  # inherited and own keys
    assert task["env"]["envSpacing"] == 20.0  # the child wins
    assert task["sim"]["dt"] == 0.0083 and task["sim"]["enable_cameras"] is True
    assert task["sim"]["use_gpu_pipeline"] is False and task["sim"]["physx"]["use_gpu"] is False
    assert cfg["train"]["params"]["config"]["name"] == "CartpoleCamera" and "defaults" not in task
    assert oige.compose("CartpoleCamera")["task"]["env"]["numEnvs"] == 32  # resolve_default with num_envs ''


def test_oige_config_resolves_like_rlgames_train(oige_double):
    keys = oige.devices("cuda:1", cuda_available=True)
    cfg = oige.oige_config(
        "Ant",
        num_envs=64,
        seed=7,
        headless=True,
        device_keys=keys,
        task_cfg={"envSpacing": 2.5},
        torch_deterministic=True,
    )
    assert cfg["task_name"] == "Ant" and cfg["seed"] == 7 and cfg["headless"] is True and cfg["test"] is False
    assert cfg["torch_deterministic"] is True
    # the old code merged task overrides at the root of the task config: task.envSpacing, not task.env.envSpacing
    assert cfg["task"]["env"]["envSpacing"] == 2.5 and "envSpacing" not in cfg["task"]
    assert cfg["task"]["env"]["numEnvs"] == 64
    assert (cfg["device_id"], cfg["rl_device"]) == (1, "cuda:1") and cfg["task"]["sim"]["use_gpu_pipeline"] is True
    assert cfg["wandb_name"] == "Ant" and cfg["train"]["params"]["config"]["num_actors"] == 64


def test_task_overrides_must_name_an_existing_task_key(oige_double):
    with pytest.raises(oige.OIGEError, match=r"task.env.envSpcing: OmniIsaacGymEnvs' task/Ant.yaml has no env"):
        oige.oige_config(
            "Ant",
            num_envs=4,
            seed=0,
            headless=True,
            device_keys=oige.devices("cpu", False),
            task_cfg={"envSpcing": 2.5},
        )


def test_oige_config_names_unknown_tasks(oige_double):
    with pytest.raises(oige.OIGEError, match=r"no task 'Humanoid'; its tasks: Ant, Cartpole"):
        oige.oige_config("Humanoid", num_envs=1, seed=0, headless=True, device_keys={})


@pytest.mark.parametrize(
    "device, expected",
    [
        ("auto", {"pipeline": "gpu", "sim_device": "gpu", "device_id": 0, "rl_device": "cuda:0"}),
        ("cuda", {"pipeline": "gpu", "sim_device": "gpu", "device_id": 0, "rl_device": "cuda:0"}),
        ("cuda:2", {"pipeline": "gpu", "sim_device": "gpu", "device_id": 2, "rl_device": "cuda:2"}),
        ("cpu", {"pipeline": "cpu", "sim_device": "cpu", "device_id": 0, "rl_device": "cpu"}),
    ],
)
def test_devices(device, expected):
    assert oige.devices(device, cuda_available=True) == expected


def test_devices_auto_without_cuda_is_cpu_and_bad_devices_are_named():
    assert oige.devices("auto", cuda_available=False)["pipeline"] == "cpu"
    with pytest.raises(oige.OIGEError, match=r"device='tpu' is not allowed"):
        oige.devices("tpu", cuda_available=True)


def test_make_oige_env_without_oige_says_how_to_install(monkeypatch):
    monkeypatch.setattr(oige, "package_dir", lambda: None)
    with pytest.raises(oige.OIGEError, match="pip install -e OmniIsaacGymEnvs"):
        oige.make_oige_env("Ant", num_envs=4, device="cpu", seed=0)


def test_make_oige_env_launches_by_the_book(oige_double):
    from omni.isaac.core.utils.torch import maths
    from omniisaacgymenvs.envs.vec_env_rlgames import LAUNCHES

    # the runner hands make_env a torch.device; the app's launcher takes only an int device id
    env = registry.make_env(
        "OIGE-Cartpole", num_envs=4, device=torch.device("cpu"), seed=3, task_cfg={"resetDist": 2.0}
    )
    assert isinstance(env, OmniIsaacGymWrapper) and env.num_envs == 4
    assert LAUNCHES == [
        {
            "headless": True,
            "physics_gpu": 0,
            "experience": oige.default_experience(True),
            "enable_viewport": False,
            "closed": False,
        }
    ]
    assert maths.CALLS[-1] == {"seed": 3, "torch_deterministic": False}
    task = env._env._task
    assert task._reset_dist == 2.0 and task._task_cfg["env"]["numEnvs"] == 4
    obs, _ = env.reset()
    assert obs.shape == (4, 4)
    env.close()
    assert LAUNCHES[0]["closed"]


def test_camera_tasks_get_a_viewport_and_oiges_camera_experience(oige_double):
    from omniisaacgymenvs.envs.vec_env_rlgames import LAUNCHES

    env = oige.make_oige_env("CartpoleCamera", num_envs=2, device="cpu", seed=0)  # the task asserts its cameras
    assert LAUNCHES[0]["enable_viewport"] is True
    assert LAUNCHES[0]["experience"] == str(oige_double.parent / "apps" / "omni.isaac.sim.python.gym.camera.kit")
    assert env._env._task.camera_width == 240
    env.close()


def test_cartpole_camera_trains_its_images_through_the_cnn_its_ppo_config_names(oige_double, tmp_path):
    """Crashed before (``mat1 and mat2 shapes cannot be multiplied``: the ``cnn:`` block was ignored and an MLP
    met ``(N, 64, 48, 3)`` images). Now rl_games' network: its convolutions on the permuted images, then [512]."""
    from omni_sfp.run.runner import Runner

    cfg = load_config(
        ["task=CartpoleCamera", "num_envs=4", "+task.env.cameraWidth=64", "+task.env.cameraHeight=48"]
        + ["max_iterations=2", "train.ppo.rollouts=8", "train.ppo.mini_batches=2", f"runs_dir={tmp_path}"]
    )
    assert "[conv2d 32/8/4, conv2d 64/4/2, conv2d 64/3/1, flatten]" in cfg.task.upstream["train.models.network"]
    assert not cfg.train.ppo.observation_normalization  # CartpoleCameraPPO.yaml: normalize_input False
    runner = Runner(cfg, disable_progressbar=True)
    assert runner.env.observation_space.shape == (64, 48, 3)
    trunk = runner.models["policy"].policy_trunk.trunk.net
    convs = [m for m in trunk.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size, c.stride) for c in convs] == [
        (3, 32, (8, 8), (4, 4)),
        (32, 64, (4, 4), (2, 2)),
        (64, 64, (3, 3), (1, 1)),
    ]
    assert [m.out_features for m in trunk.modules() if isinstance(m, torch.nn.Linear)] == [512]
    summary = runner.train()
    assert summary.iterations == 2 and summary.sfp_hit_rate == 1.0


def test_shadow_hand_openai_ff_trains_its_value_on_the_states_as_rl_games_central_value(oige_double, tmp_path):
    """Before, both roles read ``observations``: the critic went without the 187 privileged states rl_games'
    ``central_value_config`` gives it, and nothing said so; and the task did not build (``task_map`` was looked up
    by the file's name, ShadowHandOpenAI_FF, not its ``task.name``, ShadowHand)."""
    from omni_sfp.run.runner import Runner

    cfg = load_config(
        [
            "task=ShadowHandOpenAI_FF",
            "num_envs=8",
            "+task.env.episodeLength=16",
            "max_iterations=2",
            f"runs_dir={tmp_path}",
        ]
    )
    network = cfg.task.upstream["train.models.network"]
    assert "ShadowHandOpenAI_FFPPO.yaml: params.network + params.config.central_value_config.network" in network
    assert "value DeterministicMixin: net(STATES) [512, 512, 256, 128]" in network
    runner = Runner(cfg, disable_progressbar=True)
    assert runner.env.observation_space.shape == (42,) and runner.env.state_space.shape == (187,)
    model = runner.models["value"]
    assert runner.agent._state_preprocessor is not runner.agent._empty_preprocessor  # normalize_input: True
    obs, states = torch.randn(5, 42), torch.randn(5, 187)

    def value(o, s):
        return model.act({"observations": o, "states": s}, role="value")[0]

    def mean_action(o, s):
        return model.act({"observations": o, "states": s}, role="policy")[1]["mean_actions"]

    with torch.no_grad():
        assert torch.equal(value(obs, states), value(obs + 1, states))
        assert not torch.allclose(value(obs, states), value(obs, states + 1))
        assert torch.equal(mean_action(obs, states), mean_action(obs, states + 1))
        assert not torch.allclose(mean_action(obs, states), mean_action(obs + 1, states))
    summary = runner.train()
    assert summary.iterations == 2 and summary.sfp_hit_rate is None  # two networks on two inputs: nothing to share


def test_factory_tasks_compose_their_own_config_through_hydra(oige_double):
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()  # as after omni_sfp's load_config
    env = oige.make_oige_env("FactoryTaskNutBoltPick", num_envs=2, device="cpu", seed=0)
    task = env._env._task
    assert task.cfg_base["env"]["table_height"] == 0.4 and task.max_episode_length == 100
    env.reset()
    for _ in range(97):  # progress 2 .. 98 (the reset step was 1)
        _, _, terminated, truncated, _ = env.step(torch.zeros(2, 1))
        assert not terminated.any() and not truncated.any()
    _, _, terminated, truncated, _ = env.step(torch.zeros(2, 1))  # progress 99 = max_episode_length - 1
    assert truncated.all() and not terminated.any()
    env.close()


def test_torch_deterministic_reaches_set_seed(oige_double):
    from omni.isaac.core.utils.torch import maths

    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)  # what the runner does for torch_deterministic=true
    try:
        oige.make_oige_env("OIGE-Cartpole", num_envs=2, device="cpu", seed=5).close()
    finally:
        torch.use_deterministic_algorithms(was)
    assert maths.CALLS[-1] == {"seed": 5, "torch_deterministic": True}


def test_a_failed_task_build_closes_the_app(oige_double, monkeypatch):
    from omniisaacgymenvs.envs.vec_env_rlgames import LAUNCHES
    from omniisaacgymenvs.utils import task_util

    with pytest.raises(oige.OIGEError, match=r"task.env.nope"):
        oige.make_oige_env("OIGE-Cartpole", num_envs=2, device="cpu", seed=0, task_cfg={"nope": 1})
    assert LAUNCHES == []  # a bad key is refused before Isaac Sim starts
    monkeypatch.setattr(task_util, "import_tasks", lambda: ({}, {}))  # an OIGE without this task class
    with pytest.raises(oige.OIGEError, match=r"task_map has no 'Cartpole'"):
        oige.make_oige_env("OIGE-Cartpole", num_envs=2, device="cpu", seed=0)
    assert len(LAUNCHES) == 1 and LAUNCHES[0]["closed"]


def test_the_env_is_closed_at_exit(tmp_path):
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent / "oige_double")!r})
        from omni_sfp.envs import oige
        from omniisaacgymenvs.envs import vec_env_rlgames
        import atexit
        atexit.register(lambda: print("closed at exit:", vec_env_rlgames.LAUNCHES[0]["closed"]))
        env = oige.make_oige_env("OIGE-Cartpole", num_envs=2, device="cpu", seed=0)
        raise RuntimeError("training failed")
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert result.returncode == 1 and "training failed" in result.stderr
    assert "closed at exit: True" in result.stdout


def test_default_experience_needs_a_checkout_named_like_the_extension(monkeypatch, tmp_path):
    kit = tmp_path / "omni.sfp" / "config" / "omni.sfp.train.kit"
    kit.parent.mkdir(parents=True)
    kit.write_text("")
    monkeypatch.setattr(oige, "KIT_APP", kit)
    assert oige.default_experience(headless=True) == str(kit)
    assert oige.default_experience(headless=False) is None  # the .kit file is headless-only
    other = tmp_path / "omni-sfp" / "config" / "omni.sfp.train.kit"
    other.parent.mkdir(parents=True)
    other.write_text("")
    monkeypatch.setattr(oige, "KIT_APP", other)
    assert oige.default_experience(headless=True) is None  # Kit could not resolve the omni.sfp dependency


def test_the_kit_experience_lists_isaac_sims_extension_folders():
    # OIGE's apps/*.kit files, kept outside Isaac Sim's apps/, list its extension folders relative to ${exe-path}
    text = (ROOT / "config" / "omni.sfp.train.kit").read_text()
    for folder in (
        "${exe-path}/../exts",
        "${exe-path}/../extscache",
        "${exe-path}/../extsPhysics",
        "${exe-path}/exts",
        "${exe-path}/extscore",
        "${app}/../..",
    ):
        assert f'"{folder}"' in text, folder


def test_the_wrapper_is_reachable_from_the_light_module():
    assert oige.OmniIsaacGymWrapper is OmniIsaacGymWrapper


# ---- upstream settings: OIGE's train/<Task>PPO.yaml (rl_games) mapped onto omni_sfp's keys ------------------


def test_task_ant_takes_oiges_ant_settings(oige_double, capsys):
    cfg = load_config(["task=Ant"])
    ppo, models = cfg.train.ppo, cfg.train.models
    assert cfg.task.env.num_envs == 4096  # Ant.yaml: numEnvs 4096 (the old code trained 64)
    assert (ppo.rollouts, ppo.learning_epochs, ppo.mini_batches) == (16, 4, 2)  # 4096 * 16 / 32768
    assert (ppo.discount_factor, ppo.gae_lambda, ppo.learning_rate) == (0.99, 0.95, 3e-4)
    assert (ppo.learning_rate_schedule, ppo.desired_kl, ppo.learning_rate_anneal) == ("kl_adaptive", 0.008, False)
    assert (ppo.ratio_clip, ppo.value_clip, ppo.entropy_loss_scale, ppo.value_loss_scale) == (0.2, 0.2, 0.0, 1.0)
    assert (ppo.grad_norm_clip, ppo.rewards_scale, ppo.time_limit_bootstrap) == (1.0, 0.01, True)
    assert ppo.observation_normalization and ppo.value_normalization
    assert list(models.units) == [256, 128, 64] and models.activation == "elu" and not models.separate
    assert models.init == "torch_zero_bias"  # mlp.initializer: default (rl_games zeroes the biases)
    assert ppo.bounds_loss_scale == 1e-4  # params.config.bounds_loss_coef
    assert ppo.max_learning_rate == 1e-2 and ppo.value_clip == 0.2  # rl_games: AdaptiveScheduler max_lr, e_clip
    assert cfg.train.max_iterations == 500
    assert cfg.task.upstream["train.ppo.rollouts"] == "16 <- AntPPO.yaml: params.config.horizon_length"
    assert cfg.task.upstream["task.env.num_envs"] == "4096 <- Ant.yaml: env.numEnvs"
    out = capsys.readouterr().out
    assert "[omni_sfp] Ant: 27 upstream settings (command-line overrides win):" in out
    assert "train.ppo.mini_batches=2  <- AntPPO.yaml: params.config.minibatch_size (32768)" in out


def test_command_line_overrides_win_over_upstream_settings(oige_double):
    cfg = load_config(["task=Ant", "num_envs=64", "train.ppo.learning_rate=1e-3", "max_iterations=3"])
    assert cfg.num_envs == 64 and cfg.train.ppo.learning_rate == 1e-3 and cfg.max_iterations == 3
    assert cfg.train.ppo.mini_batches == 1  # 64 * 16 = 1024 samples: fewer than one 32768 minibatch
    assert "train.ppo.learning_rate" not in cfg.task.upstream and "task.env.num_envs" not in cfg.task.upstream
    assert "train.max_iterations" not in cfg.task.upstream
    cfg = load_config(["task=Ant", "num_envs=8192"])
    assert cfg.train.ppo.mini_batches == 4  # the minibatch size stays rl_games' 32768


def test_upstream_settings_are_kept_in_the_run_folder_config(oige_double, tmp_path):
    from omegaconf import OmegaConf

    cfg = load_config(["task=Ant"])
    OmegaConf.save(cfg, tmp_path / "config.yaml", resolve=True)  # what the runner does with its run folder
    saved = OmegaConf.load(tmp_path / "config.yaml")
    assert saved.task.upstream["train.max_iterations"] == "500 <- AntPPO.yaml: params.config.max_epochs"


def test_embedded_and_gymnasium_tasks_take_no_upstream_settings(capsys):
    assert upstream.settings_for("Cartpole") == [] and upstream.settings_for("gym:Pendulum-v1") == []
    cfg = load_config(["task=gym:Pendulum-v1"])
    assert dict(cfg.task.upstream) == {} and capsys.readouterr().out == ""


def test_rlgames_mapping_edge_cases():
    train = {
        "params": {
            "network": {"separate": True, "mlp": {"units": [8], "activation": "relu"}},
            "config": {
                "horizon_length": 8,
                "mini_epochs": 2,
                "gamma": 0.9,
                "tau": 0.9,
                "learning_rate": 1e-3,
                "lr_schedule": "linear",
                "e_clip": 0.1,
                "clip_value": False,
                "critic_coef": 1,
                "grad_norm": 1.0,
                "truncate_grads": False,
                "minibatch_size": 48,
            },
        }
    }
    task = {"env": {"numEnvs": 10}}
    got = {s.key: s.value for s in upstream.rlgames_settings(train, task, "XPPO.yaml", "X.yaml")}
    assert got["train.ppo.learning_rate_schedule"] == "fixed" and "train.ppo.desired_kl" not in got
    assert got["train.ppo.learning_rate_anneal"] is True  # rl_games' LinearScheduler: the rate falls over the run
    assert got["train.ppo.value_clip"] == 0.0 and got["train.ppo.grad_norm_clip"] == 0.0
    assert got["train.ppo.value_loss_scale"] == 0.5 and got["train.models.separate"] is True
    assert got["train.ppo.mini_batches"] == 1  # 80 samples / 48 -> 1 (the largest divisor of 80 <= 1)
    got = {s.key: s.value for s in upstream.rlgames_settings(train, {"env": {"numEnvs": 30}}, "X", "Y")}
    assert got["train.ppo.mini_batches"] == 5  # 240 / 48 = 5


def test_a_bad_upstream_config_is_one_config_error_line(oige_double, monkeypatch):
    def broken(task, **kwargs):
        raise oige.OIGEError("OmniIsaacGymEnvs' task/Ant.yaml: something is wrong")

    monkeypatch.setattr(oige, "compose", broken)
    with pytest.raises(ConfigError, match=r"^OmniIsaacGymEnvs' task/Ant.yaml: something is wrong$"):
        load_config(["task=Ant"])


def shadow_hand_lstm_runner(tmp_path):
    from omni_sfp.run.runner import Runner

    cfg = load_config(
        [
            "task=ShadowHandOpenAI_LSTM",
            "num_envs=8",
            "+task.env.episodeLength=6",  # episodes end inside the training sequences
            "max_iterations=2",
            f"runs_dir={tmp_path}",
        ]
    )
    return cfg, Runner(cfg, disable_progressbar=True)


def test_shadow_hand_openai_lstm_builds_its_registered_lstm_networks(oige_double, tmp_path):
    """OmniIsaacGymEnvs' ShadowHandOpenAI_LSTM: its task config inherits ShadowHandOpenAI_FF's; its rl_games
    network is an LSTM (1024 units, before the MLP, layer norm) for the policy on observations and another for the
    central value on states. Before, ``params.network.rnn`` was refused."""
    cfg, runner = shadow_hand_lstm_runner(tmp_path)
    network = cfg.task.upstream["train.models.network"]
    assert "LSTM 1x1024 (sequences of 4) before the policy GaussianMixin: net(OBSERVATIONS) [512]" in network
    assert "value DeterministicMixin: net(STATES) [512]" in network
    policy, value = runner.models["policy"], runner.models["value"]
    assert policy.get_specification()["rnn"] == {"sequence_length": 4, "sizes": [(1, 8, 1024)] * 2}
    assert value.value_trunk.key == "states" and runner.env.state_space.shape == (187,)
    assert isinstance(policy.policy_trunk.norm, torch.nn.LayerNorm)  # rl_games' layer_norm
    assert runner.agent._rnn_roles == {"policy": slice(0, 2), "value": slice(2, 4)}


@pytest.mark.slow
def test_shadow_hand_openai_lstm_trains_with_its_registered_lstm_networks(oige_double, tmp_path, monkeypatch):
    """Two iterations of the two 1024-unit LSTMs (about 30 s on 2 loaded cores). The final evaluation is left out:
    the double's episodes are not bounded for it, so it would play 1000 steps."""
    from omni_sfp.run.outputs import evaluation

    monkeypatch.setattr(evaluation.FinalEvaluation, "end", lambda self, run, summary: None)
    _, runner = shadow_hand_lstm_runner(tmp_path)
    summary = runner.train()
    assert summary.iterations == 2 and summary.sfp_hit_rate is None  # two networks on two inputs: nothing shared
    assert runner.agent.memory.get_tensor_by_name("rnn_2").abs().sum() > 0  # the critic's states were stored
