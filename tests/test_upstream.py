"""omni_sfp.envs.upstream's network mapping: the network a library registered reaches ``train.models``, a plain MLP as
units and activation, anything else whole as ``train.models.network``; what cannot be built is one line."""

from __future__ import annotations

import pytest

from omni_sfp.envs import upstream
from omni_sfp.sfp import network
from tests.test_network import CAMERA_MODELS

MLP = [{"name": "net", "input": "OBSERVATIONS", "layers": [32, 32], "activations": "elu"}]


def _settings(models: dict) -> dict:
    return {s.key: s.value for s in upstream.skrl_settings({"models": models, "agent": {"class": "PPO"}}, "x.yaml")}


def test_a_plain_mlp_config_maps_to_units_and_activation():
    got = _settings({"separate": False, "policy": {"network": MLP, "initial_log_std": -0.5}, "value": {"network": MLP}})
    assert got["train.models.units"] == [32, 32] and got["train.models.activation"] == "elu"
    assert got["train.models.initial_log_std"] == -0.5 and "train.models.network" not in got
    assert got["train.models.init"] == "torch"  # skrl's instantiators keep nn.Linear's default init
    assert got["train.ppo.learning_rate_anneal"] is False  # skrl's PPO runs its rate to the end (our default anneals)


def test_the_camera_config_maps_whole_to_the_network_key():
    """Before: only ``network[0].layers`` was read, so the CNN was dropped and an MLP met the images."""
    got = _settings(CAMERA_MODELS)
    assert got["train.models.network"]["policy"]["network"] == CAMERA_MODELS["policy"]["network"]
    assert "train.models.units" not in got
    spec = network.parse(got["train.models.network"])
    assert spec.policy.network == spec.value.network and spec.policy.cls == "GaussianMixin"


def test_a_categorical_config_maps_to_the_network_key():
    """8 of Isaac Lab 3.0.0's skrl configs (cartpole_showcase) use CategoricalMixin."""
    models = {"policy": {"class": "CategoricalMixin", "unnormalized_log_prob": True, "network": MLP}}
    models["value"] = {"class": "DeterministicMixin", "network": MLP, "output": "ONE"}
    got = _settings(models)
    assert got["train.models.network"]["policy"]["class"] == "CategoricalMixin"


def test_a_critic_on_states_maps_to_the_network_key():
    states = [{"name": "net", "input": "STATES", "layers": [64], "activations": "elu"}]
    got = _settings({"policy": {"network": MLP}, "value": {"network": states}})
    assert got["train.models.network"]["value"]["network"][0]["input"] == "STATES"


def test_an_unbuildable_skrl_network_is_one_upstream_error_line():
    with pytest.raises(upstream.UpstreamError, match="x.yaml") as error:
        _settings({"policy": {"network": [{"name": "n", "input": "OBSERVATIONS", "layers": [{"lstm": 8}]}]}})
    assert "\n" not in str(error.value)


TRAIN = {
    "horizon_length": 16,
    "mini_epochs": 4,
    "minibatch_size": 64,
    "gamma": 0.99,
    "tau": 0.95,
    "learning_rate": 1e-4,
    "e_clip": 0.2,
}
CNN = {
    "type": "conv2d",
    "activation": "relu",
    "convs": [{"filters": 32, "kernel_size": 8, "strides": 4, "padding": 0}],
}


def _rlgames(network_block: dict, **config) -> dict:
    train = {"params": {"network": network_block, "config": {**TRAIN, **config}}}
    return {s.key: s.value for s in upstream.rlgames_settings(train, {"env": {"numEnvs": 8}}, "XPPO.yaml", "X.yaml")}


def test_rlgames_cnn_block_maps_to_the_network_key():
    """Before: the ``cnn:`` block was ignored (OIGE's CartpoleCamera: ``mat1 and mat2 shapes cannot be multiplied``)."""
    got = _rlgames({"space": {"continuous": {}}, "cnn": CNN, "mlp": {"units": [512], "activation": "elu"}})
    containers = got["train.models.network"]["policy"]["network"]
    assert [c["name"] for c in containers] == ["features_extractor", "net"]
    assert containers[0]["input"] == "permute(OBSERVATIONS, (0, 3, 1, 2))"  # rl_games' permute_input default
    assert "train.models.units" not in got


def test_rlgames_central_value_config_gives_a_critic_on_states():
    """OIGE's ShadowHandOpenAI_FF: rl_games trains its value on ``states`` through ``central_value_config``."""
    central = {"normalize_input": True, "learning_rate": 5e-4, "mini_epochs": 4, "network": {"mlp": {"units": [64]}}}
    got = _rlgames({"space": {"continuous": {}}, "mlp": {"units": [32]}}, central_value_config=central)
    value = got["train.models.network"]["value"]["network"]
    assert value[0]["input"] == "STATES" and value[0]["layers"] == [64]
    train = {"params": {"network": {"space": {"continuous": {}}, "mlp": {"units": [32]}}, "config": TRAIN}}
    train["params"]["config"] = {**TRAIN, "central_value_config": central}
    (setting,) = [s for s in upstream.rlgames_settings(train, {"env": {"numEnvs": 8}}, "S", "T") if "network" in s.key]
    assert "learning_rate, mini_epochs are not mapped" in setting.source  # said, not silently dropped


def test_rlgames_discrete_space_maps_to_a_categorical_policy():
    got = _rlgames({"space": {"discrete": {}}, "mlp": {"units": [32]}})
    assert got["train.models.network"]["policy"]["class"] == "CategoricalMixin"


def test_rlgames_recurrent_network_maps_to_an_rnn_block():
    got = _rlgames({"space": {"continuous": {}}, "mlp": {"units": [32]}, "rnn": {"name": "lstm", "units": 64}})
    rnn = got["train.models.network"]["rnn"]
    assert (rnn["class"], rnn["hidden_size"], rnn["sequence_length"]) == ("LSTM", 64, 4)


def test_a_recurrent_critic_without_a_recurrent_policy_is_refused_naming_the_file():
    network_block = {"space": {"continuous": {}}, "mlp": {"units": [32]}}
    critic = {"mlp": {"units": [32]}, "rnn": {"name": "lstm", "units": 64}}
    with pytest.raises(upstream.UpstreamError, match="XPPO.yaml.*recurrent critic") as error:
        _rlgames(network_block, central_value_config={"network": critic})
    assert "\n" not in str(error.value)


def test_a_network_setting_prints_as_a_summary_not_a_dump():
    (setting,) = [s for s in upstream.skrl_settings({"models": CAMERA_MODELS}, "cam.yaml") if "network" in s.key]
    line = setting.line()
    assert line.startswith("train.models.network={...}") and "conv2d 32/8/4" in line and "\n" not in line
