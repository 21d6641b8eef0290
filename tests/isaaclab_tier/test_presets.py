"""Isaac Lab 3's selector tokens (``presets=``, ``physics=``, ``renderer=``) on our CLI, against the real Isaac Lab
3.0.0: applied to the env config as its ``parse_env_cfg(overrides=...)`` applies them, selecting the member of a
skrl config family, refused in one line where a name is unknown, listed by ``--help`` and ``list_tasks``, and every
preset of the contrib showcase (Box, Discrete, MultiDiscrete, Dict and Tuple observations) trained through the CLI.
"""

from __future__ import annotations

import re

import gymnasium
import pytest
from omegaconf import OmegaConf
from test_isaaclab import run_train

from omni_sfp.envs import isaaclab, listing, registry
from omni_sfp.run.compose import ConfigError, load_config
from omni_sfp.train import _task_presets

SHOWCASE = "IsaacContrib-Cartpole-Showcase-Direct"
SPACES = ("box", "discrete", "multidiscrete", "dict", "tuple")
PRESETS = [f"{obs}_{act}" for obs in SPACES for act in ("box", "discrete", "multidiscrete")]


def test_the_showcase_declares_the_fifteen_presets_we_train():
    assert isaaclab.preset_names(SHOWCASE, "skrl_cfg_entry_point")["presets"] == sorted(PRESETS)


def test_the_showcase_default_takes_its_family_default_not_a_crash():
    """Before: ``AttributeError: _Preset object has no attribute 'get'`` (the skrl family read as one config)."""
    cfg = load_config([f"task={SHOWCASE}"])
    assert cfg.presets is None and list(cfg.train.models.units) == [32, 32]  # box_box: a plain MLP
    assert cfg.train.models.network is None
    assert cfg.task.upstream["train.ppo.rollouts"].endswith("agents:skrl_cfg: agent.rollouts")


def test_a_preset_selects_its_env_config_and_its_skrl_network():
    cfg = load_config([f"task={SHOWCASE}", "presets=dict_box"])
    policy = cfg.train.models.network.policy
    assert [c.input for c in policy.network] == [
        'OBSERVATIONS["joint-positions"]',
        'OBSERVATIONS["joint-velocities"]',
        "net_pos + net_vel",
    ]
    assert cfg.task.upstream["train.ppo.rollouts"].endswith("agents:skrl_cfg (presets=dict_box): agent.rollouts")
    discrete = load_config([f"task={SHOWCASE}", "presets=discrete_discrete"])
    assert discrete.train.models.network.policy["class"] == "CategoricalMixin"
    assert discrete.train.ppo.observation_normalization is False  # its state_preprocessor: null
    env_cfg, agent_cfg = isaaclab.resolve_configs(SHOWCASE, ["presets=tuple_box"], "skrl_cfg_entry_point")
    assert isinstance(env_cfg.observation_space, gymnasium.spaces.Tuple)
    assert agent_cfg["agent"]["experiment"]["directory"] == "cartpole_direct_tuple_box"


@pytest.mark.parametrize(
    "override, expected",
    [
        ("presets=dict_bx", "presets=dict_bx: task 'IsaacContrib-Cartpole-Showcase-Direct' has no preset 'dict_bx'"),
        ("physics=bullet", "physics=bullet: task 'IsaacContrib-Cartpole-Showcase-Direct' has no physics preset"),
        ("renderer=rtx", "has no renderer preset 'rtx'; its presets: presets: box_box, box_discrete"),
    ],
)
def test_an_unknown_name_is_one_line_listing_the_tasks_names(override, expected):
    with pytest.raises(ConfigError) as error:
        load_config([f"task={SHOWCASE}", override])
    assert expected in str(error.value) and "\n" not in str(error.value)
    assert "physics: isaacsim_physx, newton_kamino, newton_mjwarp, ovphysx, physx; renderer: (none)" in str(error.value)


def test_an_unknown_preset_exits_2_with_one_line(tmp_path):
    result = run_train(f"task={SHOWCASE}", "presets=dict_bx", "device=cpu", cwd=tmp_path, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("omni_sfp.train: error: presets=dict_bx: task") and "dict_box, dict_discrete" in last


def test_the_tokens_reach_the_env_as_isaac_lab_applies_them():
    env = registry.make_env(SHOWCASE, num_envs=2, device="cpu", seed=0, task_cfg={"overrides": ["presets=dict_box"]})
    try:
        assert isinstance(env.observation_space, gymnasium.spaces.Dict)
        assert type(env._unwrapped.cfg).__name__ == "DictBoxEnvCfg" and env._unwrapped.cfg.scene.num_envs == 2
        obs, _ = env.reset()
        assert obs.shape == (2, 4)  # skrl's wrapper: the Dict flattened (2 + 2)
    finally:
        env.close()


def test_help_and_list_tasks_name_a_tasks_presets():
    lines = _task_presets(SHOWCASE).splitlines()
    assert lines[0].startswith(f"task {SHOWCASE}: presets= box_box, box_discrete") and "tuple_multidiscrete" in lines[0]
    assert lines[1] == f"task {SHOWCASE}: physics= isaacsim_physx, newton_kamino, newton_mjwarp, ovphysx, physx"
    entry = gymnasium.spec(SHOWCASE).kwargs["env_cfg_entry_point"]
    assert listing._isaaclab_presets(listing._isaaclab_cfg(entry)) == ",".join(sorted(PRESETS))
    camera = gymnasium.spec("Isaac-Cartpole-Camera-Direct").kwargs["env_cfg_entry_point"]
    assert "depth" in listing._isaaclab_presets(listing._isaaclab_cfg(camera)).split(",")
    assert (
        listing._isaaclab_presets(
            listing._isaaclab_cfg(gymnasium.spec("Isaac-Cartpole-Direct").kwargs["env_cfg_entry_point"])
        )
        is None
    )  # physics= names only: no presets= to list


def test_every_showcase_preset_trains_through_one_cli_sweep(tmp_path):
    """Each preset's own observation and action spaces through its own registered network, the value call served by
    the cache (every showcase network shares its trunk: ``separate: False``, the same containers). One process for
    the 15 jobs (``-m``): each job's env is closed before the next is built (Isaac Lab allows one simulation in a
    process; before, the second job failed with "Simulation context already exists")."""
    result = run_train(
        "-m",
        f"presets=choice({','.join(PRESETS)})",
        f"task={SHOWCASE}",
        "device=cpu",
        "num_envs=4",
        "max_iterations=1",
        "train.ppo.rollouts=8",
        f"runs_dir={tmp_path / 'runs'}",
        cwd=tmp_path,
        timeout=1800,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.count("SFP cache hits: 100.0%") == len(PRESETS)
    for number, preset in enumerate(PRESETS, start=1):
        assert f"(presets={preset}): agent.learning_epochs" in result.stdout  # the family member's settings
        assert re.search(rf"^{number}\s+presets={preset}\s+\S+\s+[\d.]+\s+100\.0%\s+0\s", result.stdout, re.M), preset
    saved = [OmegaConf.load(path).presets for path in (tmp_path / "runs").glob("*/*/config.yaml")]
    assert sorted(saved) == sorted(PRESETS)
