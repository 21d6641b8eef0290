"""The real Isaac Lab 3.0.0 camera task, ``Isaac-Cartpole-Camera-Direct`` (kit-less; Newton renders its images on
the CPU): its presets env config resolves, its registered CNN reaches the models, and it builds and steps.

Before: ``AttributeError: CartpoleCameraEnvCfg object has no attribute 'scene'`` in omni_sfp/envs/upstream.py (the
registered env config is a presets container, which Isaac Lab's ``parse_env_cfg`` resolves), and an MLP would have
met the images (only ``network[0].layers`` was read).
"""

from __future__ import annotations

import torch

from omni_sfp.envs import registry, upstream
from omni_sfp.run.compose import load_config
from omni_sfp.sfp import models as sfp_models
from omni_sfp.sfp import network

CAMERA = "Isaac-Cartpole-Camera-Direct"


def test_the_camera_task_takes_its_registered_num_envs_and_cnn():
    settings = {s.key: s.value for s in upstream.settings_for(CAMERA)}
    assert settings["task.env.num_envs"] == 512
    spec = network.parse(settings["train.models.network"])
    kinds = [layer.kind for layer in spec.policy.network[0].layers]
    assert kinds == ["conv2d", "conv2d", "conv2d", "flatten"] and spec.policy.network == spec.value.network
    cfg = load_config([f"task={CAMERA}", "num_envs=4"])
    assert cfg.train.models.network is not None and cfg.num_envs == 4


def test_the_camera_env_builds_and_its_images_reach_a_cached_cnn():
    env = registry.make_env(CAMERA, num_envs=2, device=torch.device("cpu"), seed=1)
    try:
        assert env.observation_space.shape == (6, 96, 96)
        obs, _ = env.reset()
        assert obs.shape == (2, 6 * 96 * 96) and torch.isfinite(obs).all() and obs.std() > 0  # real pixels
        spec = network.parse({s.key: s.value for s in upstream.settings_for(CAMERA)}["train.models.network"])
        model = sfp_models.build_models(spec, env.observation_space, env.action_space, torch.device("cpu"))["policy"]
        with torch.no_grad():
            actions, _ = model.act({"observations": obs}, role="policy")
            model.act({"observations": obs}, role="value")
        assert model.sfp_stats.hits == 1
        obs, reward, terminated, truncated, _ = env.step(actions.clamp(-1, 1))
        assert obs.shape == (2, 6 * 96 * 96) and reward.shape == (2, 1)
    finally:
        env.close()


def test_the_camera_task_trains_through_the_cli(tmp_path):
    """What a user runs: its images through its registered CNN, every value call served by the cache."""
    from test_isaaclab import train_briefly

    out = train_briefly(CAMERA, tmp_path, num_envs=4)
    assert "features_extractor(OBSERVATIONS) [conv2d 32/8/4, conv2d 64/4/2, conv2d 64/3/1, flatten]" in out


def test_the_camera_task_trains_with_its_depth_preset(tmp_path):
    """``presets=depth`` (Isaac Lab's token): depth images instead of RGB, through the same registered CNN."""
    from test_isaaclab import train_briefly

    out = train_briefly(CAMERA, tmp_path, "presets=depth", num_envs=4)
    assert "(presets=depth)" in out and "features_extractor(OBSERVATIONS) [conv2d 32/8/4" in out
