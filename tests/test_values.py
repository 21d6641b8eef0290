"""omni_sfp/config/values.py: what two settings decide together, read alike by the runner and the panel."""

from omegaconf import OmegaConf

from omni_sfp.config.values import isaaclab_overrides, quote_preset_lists
from omni_sfp.run.compose import load_config


def test_isaac_labs_tokens_become_the_overrides_parse_env_cfg_takes():
    cfg = OmegaConf.create({"presets": "dict_box,rgb", "physics": "newton_mjwarp", "renderer": None})
    assert isaaclab_overrides(cfg) == ["presets=dict_box,rgb", "physics=newton_mjwarp"]
    assert isaaclab_overrides(load_config(["task=Cartpole"])) == []  # the shipped default: none


def test_a_comma_list_of_presets_is_one_value_and_a_sweep_function_stays_a_sweep():
    assert quote_preset_lists(["presets=a,b", "seed=0,1", "presets=a"]) == ["presets='a,b'", "seed=0,1", "presets=a"]
    assert quote_preset_lists(["presets='a,b'", "presets=choice(a,b)"]) == ["presets='a,b'", "presets=choice(a,b)"]
