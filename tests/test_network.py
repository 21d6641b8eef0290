"""omni_sfp.sfp.network: models from a network spec match the library that registered it (skrl's model instantiators,
rl_games' A2C builder), share what both roles share through the cache, and refuse what they cannot build."""

from __future__ import annotations

import copy

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium import spaces

from omni_sfp.sfp import models as sfp_models
from omni_sfp.sfp import network
from omni_sfp.sfp.network import NetworkSpecError

CPU = torch.device("cpu")
BOX1 = spaces.Box(-1.0, 1.0, (1,))

# Isaac Lab 3.0.0's isaaclab_tasks/core/cartpole/agents/skrl_direct_camera_ppo_cfg.yaml, models section
CAMERA_TRUNK = [
    {
        "name": "features_extractor",
        "input": "OBSERVATIONS",
        "layers": [
            {"conv2d": {"out_channels": 32, "kernel_size": 8, "stride": 4, "padding": 0}},
            {"conv2d": {"out_channels": 64, "kernel_size": 4, "stride": 2, "padding": 0}},
            {"conv2d": {"out_channels": 64, "kernel_size": 3, "stride": 1, "padding": 0}},
            "flatten",
        ],
        "activations": "relu",
    },
    {"name": "net", "input": "features_extractor", "layers": [512], "activations": "elu"},
]
CAMERA_MODELS = {
    "separate": False,
    "policy": {
        "class": "GaussianMixin",
        "clip_actions": False,
        "clip_log_std": True,
        "min_log_std": -20.0,
        "max_log_std": 2.0,
        "initial_log_std": 0.0,
        "network": CAMERA_TRUNK,
        "output": "ACTIONS",
    },
    "value": {"class": "DeterministicMixin", "clip_actions": False, "network": CAMERA_TRUNK, "output": "ONE"},
}
CAMERA_OBS = spaces.Box(-np.inf, np.inf, (6, 48, 48))  # the camera task's channel-first images, smaller


def _shapes(module: torch.nn.Module) -> list[tuple[int, ...]]:
    return sorted(tuple(p.shape) for p in module.parameters())


def test_the_camera_config_builds_the_network_skrl_builds():
    from skrl.utils.model_instantiators.torch import shared_model

    spec = network.parse(CAMERA_MODELS)
    ours = sfp_models.build_models(spec, CAMERA_OBS, BOX1, CPU)["policy"]
    roles = [dict(CAMERA_MODELS["policy"]), dict(CAMERA_MODELS["value"])]
    skrl_model = shared_model(
        observation_space=CAMERA_OBS,
        action_space=BOX1,
        device=CPU,
        roles=["policy", "value"],
        parameters=[{k: v for k, v in r.items() if k != "class"} for r in roles],
        structure=["GaussianMixin", "DeterministicMixin"],
    )
    with torch.no_grad():  # its lazy layers take their shapes from a first forward
        skrl_model.act({"observations": torch.zeros(1, 6 * 48 * 48)}, role="policy")
        skrl_model.act({"observations": torch.zeros(1, 6 * 48 * 48)}, role="value")
    assert _shapes(ours) == _shapes(skrl_model)


def test_the_shared_trunk_runs_once_and_gives_the_double_pass_result():
    torch.manual_seed(0)
    spec = network.parse(CAMERA_MODELS)
    cached = sfp_models.build_models(spec, CAMERA_OBS, BOX1, CPU)["policy"]
    double = sfp_models.build_models(spec, CAMERA_OBS, BOX1, CPU, single_forward_pass=False)["policy"]
    double.load_state_dict(cached.state_dict())
    x = torch.randn(8, 6 * 48 * 48)
    losses = []
    for model in (cached, double):
        inputs = {"observations": x}
        mean, _ = model.compute(inputs, role="policy")
        value, _ = model.compute(inputs, role="value")
        losses.append((mean.square().sum() + value.sum(), mean, value))
        losses[-1][0].backward()
    assert cached.sfp_stats.hits == 1 and cached.sfp_stats.misses == 1
    assert double.sfp_stats.hits == 0
    assert torch.equal(losses[0][1], losses[1][1]) and torch.equal(losses[0][2], losses[1][2])
    for a, b in zip(cached.parameters(), double.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6)
    assert "for both roles, through the single-forward-pass cache" in sfp_models.describe(
        {"policy": cached, "value": cached}
    )


def test_rlgames_cnn_block_builds_the_network_rl_games_builds():
    from rl_games.algos_torch.network_builder import A2CBuilder

    # OmniIsaacGymEnvs 4.0.0's omniisaacgymenvs/cfg/train/CartpoleCameraPPO.yaml, params.network
    block = {
        "name": "actor_critic",
        "separate": False,
        "space": {
            "continuous": {
                "mu_activation": "None",
                "sigma_activation": "None",
                "mu_init": {"name": "default"},
                "sigma_init": {"name": "const_initializer", "val": 0},
                "fixed_sigma": True,
            }
        },
        "cnn": {
            "type": "conv2d",
            "activation": "relu",
            "initializer": {"name": "default"},
            "regularizer": {"name": "None"},
            "convs": [
                {"filters": 32, "kernel_size": 8, "strides": 4, "padding": 0},
                {"filters": 64, "kernel_size": 4, "strides": 2, "padding": 0},
                {"filters": 64, "kernel_size": 3, "strides": 1, "padding": 0},
            ],
        },
        "mlp": {"units": [512], "activation": "elu", "initializer": {"name": "default"}},
    }
    obs = spaces.Box(0.0, 1.0, (64, 64, 3))  # OIGE's CartpoleCamera: HWC images, which rl_games permutes
    ours = sfp_models.build_models(network.parse(network.from_rlgames(block)), obs, BOX1, CPU)["policy"]
    builder = A2CBuilder()
    builder.load(copy.deepcopy(block))
    theirs = builder.build("a2c", actions_num=1, input_shape=(64, 64, 3), num_seqs=1, value_size=1)
    ours_shapes = _shapes(ours)
    assert ours_shapes == _shapes(theirs)  # sigma / log_std included
    # HWC in: the first convolution sees 3 channels, as rl_games' permute_input makes it
    assert ours.policy_trunk.trunk.net.blocks["features_extractor"][0].in_channels == 3


@pytest.mark.parametrize("before_mlp", [True, False])
@pytest.mark.parametrize("name", ["lstm", "gru"])
def test_rlgames_rnn_block_builds_rl_games_own_layers(name, before_mlp):
    """OmniIsaacGymEnvs' ShadowHandOpenAI_LSTM block (lstm, before_mlp, layer_norm) and its variants: the same
    parameter shapes as rl_games' own A2CBuilder makes (the recurrent layer, its layer norm, the mlp, the heads)."""
    from rl_games.algos_torch.network_builder import A2CBuilder

    block = {
        "separate": False,
        "space": {
            "continuous": {
                "mu_activation": "None",
                "sigma_activation": "None",
                "mu_init": {"name": "default"},
                "sigma_init": {"name": "const_initializer", "val": 0},
                "fixed_sigma": True,
            }
        },
        "mlp": {"units": [32], "activation": "relu", "initializer": {"name": "default"}},
        "rnn": {"name": name, "units": 24, "layers": 1, "before_mlp": before_mlp, "layer_norm": True},
    }
    models = network.from_rlgames(block, seq_length=8)
    assert models["rnn"] == {
        "class": name.upper(), "hidden_size": 24, "num_layers": 1, "sequence_length": 8,
        "before_mlp": before_mlp, "concat_input": False, "layer_norm": True,
    }  # fmt: skip
    obs = gymnasium.spaces.Box(-1, 1, (10,))
    ours = sfp_models.build_models(network.parse(models), obs, BOX1, CPU, num_envs=4)["policy"]
    builder = A2CBuilder()
    builder.load(copy.deepcopy(block))
    theirs = builder.build("a2c", actions_num=1, input_shape=(10,), num_seqs=4, value_size=1)
    assert sorted(_shapes(ours)) == sorted(_shapes(theirs))
    assert network.from_rlgames(block)["rnn"]["sequence_length"] == 4  # rl_games' default seq_length


def test_a_recurrent_critic_goes_with_a_recurrent_policy_and_one_rnn_block():
    """OmniIsaacGymEnvs' ShadowHandOpenAI_LSTM: the policy's LSTM on observations, the critic's on states."""
    lstm = {"name": "lstm", "units": 32, "layers": 1, "before_mlp": True, "layer_norm": True}
    models = network.from_rlgames(
        {"space": {"continuous": {}}, "mlp": {"units": [64]}, "rnn": lstm},
        central_value={"mlp": {"units": [64]}, "rnn": lstm},
    )
    assert models["rnn"]["hidden_size"] == 32 and models["value"]["network"][0]["input"] == "STATES"
    for policy_rnn, critic_rnn, message in [
        (lstm, None, "a recurrent critic on states goes with a recurrent policy"),
        (None, lstm, "a recurrent critic on states goes with a recurrent policy"),
        (lstm, {**lstm, "units": 64}, "differs from params.network.rnn"),
    ]:
        with pytest.raises(NetworkSpecError, match=message) as error:
            network.from_rlgames(
                {"space": {"continuous": {}}, "mlp": {"units": [64]}, **({"rnn": policy_rnn} if policy_rnn else {})},
                central_value={"mlp": {"units": [64]}, **({"rnn": critic_rnn} if critic_rnn else {})},
            )
        assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "block, message",
    [
        ({"class": "RNN"}, "is not one of LSTM, GRU"),
        ({"hidden_size": 0}, "hidden_size: 0 is not a positive integer"),
        ({"units": 4}, "unknown key"),
    ],
)
def test_a_bad_rnn_block_is_refused_in_one_line(block, message):
    net = [{"name": "net", "input": "OBSERVATIONS", "layers": [8]}]
    with pytest.raises(NetworkSpecError, match=message) as error:
        network.parse({"rnn": block, "policy": {"network": net}, "value": {"network": net}})
    assert "\n" not in str(error.value)


def test_a_critic_on_states_reads_states_and_shares_nothing():
    """rl_games' central_value_config (ShadowHandOpenAI_FF): the value network reads states only."""
    models = network.from_rlgames(
        {"space": {"continuous": {}}, "mlp": {"units": [32], "activation": "elu"}},
        central_value={"mlp": {"units": [64, 32], "activation": "elu"}},
    )
    obs, states = spaces.Box(-1, 1, (5,)), spaces.Box(-1, 1, (9,))
    built = sfp_models.build_models(network.parse(models), obs, spaces.Box(-1, 1, (2,)), CPU, state_space=states)
    model = built["policy"]
    x, s = torch.randn(4, 5), torch.randn(4, 9)
    value = model.compute({"observations": x, "states": s}, role="value")[0]
    assert torch.equal(value, model.compute({"observations": torch.randn(4, 5), "states": s}, role="value")[0])
    assert not torch.equal(value, model.compute({"observations": x, "states": torch.randn(4, 9)}, role="value")[0])
    policy = model.compute({"observations": x, "states": s}, role="policy")[0]
    assert torch.equal(policy, model.compute({"observations": x, "states": torch.randn(4, 9)}, role="policy")[0])
    assert model.sfp_stats.hits == 0 and not list(network.sfp_modules(model))
    assert "nothing shared" in sfp_models.describe(built)


def test_discrete_actions_get_a_categorical_policy_with_argmax_as_the_deterministic_action():
    obs = spaces.Box(-1, 1, (4,))
    models = network.default_spec(
        obs, spaces.Discrete(3), units=[16], activation="elu", separate=False, initial_log_std=0.0, task="t"
    )
    model = sfp_models.build_models(network.parse(models), obs, spaces.Discrete(3), CPU)["policy"]
    x = torch.randn(6, 4)
    actions, outputs = model.act({"observations": x}, role="policy")
    assert actions.shape == (6, 1) and actions.dtype == torch.int64 and int(actions.max()) < 3
    logits = model.compute({"observations": x}, role="policy")[0]
    assert torch.equal(outputs["mean_actions"], logits.argmax(-1, keepdim=True))
    assert torch.allclose(
        outputs["log_prob"], torch.log_softmax(logits, -1).gather(1, actions), atol=1e-6
    )  # the log-probability of the action taken
    assert model.get_entropy(role="policy").shape == (6, 1)


def test_multidiscrete_actions_get_a_multicategorical_policy():
    obs, act = spaces.Box(-1, 1, (4,)), spaces.MultiDiscrete([3, 2])
    models = network.default_spec(obs, act, units=[16], activation="elu", separate=True, initial_log_std=0, task="t")
    built = sfp_models.build_models(network.parse(models), obs, act, CPU)
    actions, outputs = built["policy"].act({"observations": torch.randn(5, 4)}, role="policy")
    assert actions.shape == (5, 2) and bool((actions[:, 0] < 3).all()) and bool((actions[:, 1] < 2).all())
    assert outputs["mean_actions"].shape == (5, 2)
    assert built["policy"] is not built["value"]


def test_uint8_images_get_a_small_cnn_that_scales_them_where_they_are():
    obs = spaces.Box(0, 255, (16, 16, 3), dtype=np.uint8)  # HWC, as Gymnasium's pixel wrappers give them
    models = network.default_spec(obs, BOX1, units=[32], activation="elu", separate=False, initial_log_std=0, task="t")
    extractor = models["policy"]["network"][0]
    assert extractor["input"] == "permute(OBSERVATIONS, (0, 3, 1, 2)) / 255"
    model = sfp_models.build_models(network.parse(models), obs, BOX1, CPU)["policy"]
    pixels = torch.randint(0, 256, (2, 16 * 16 * 3)).float()
    a = model.compute({"observations": pixels}, role="value")[0]
    trunk = model.policy_trunk.trunk.net
    image = pixels.reshape(2, 16, 16, 3).permute(0, 3, 1, 2) / 255
    expected = model.value_head(trunk.blocks["net"](trunk.blocks["features_extractor"](image)))
    torch.testing.assert_close(a, expected)


def test_flat_box_in_and_out_gets_the_tuned_mlp_as_a_spec():
    models = network.default_spec(BOX1, BOX1, units=[8], activation="elu", separate=False, initial_log_std=0, task="t")
    assert models == network.mlp_spec([8], "elu") and network.plain_mlp(network.parse(models)) == ([8], "elu")


@pytest.mark.parametrize(
    ("observation_space", "action_space", "named"),
    [
        (spaces.Dict({"a": spaces.Dict({"b": spaces.Box(-1, 1, (2,))})}), BOX1, "observation entry 'a' is Dict"),
        (spaces.Tuple((spaces.Box(-1, 1, (2, 2)),)), BOX1, r"observation entry 0 is Box\(-1.0, 1.0, \(2, 2\)"),
        (spaces.Box(-1, 1, (2, 3)), BOX1, r"observation space Box\(-1.0, 1.0, \(2, 3\)"),
        (spaces.Box(-1, 1, (2,)), spaces.Tuple((spaces.Discrete(2), spaces.Discrete(2))), "Tuple"),
    ],
)
def test_spaces_without_a_default_network_are_refused_in_one_line(observation_space, action_space, named):
    with pytest.raises(NetworkSpecError, match=named) as error:
        network.default_spec(
            observation_space, action_space, units=[8], activation="elu", separate=False, initial_log_std=0, task="t"
        )
    assert "\n" not in str(error.value)


def test_a_critic_reads_an_entry_of_a_dict_state():
    """``STATES["key"]``: the value's own trunk on one entry of a Dict state, the policy's on the observations."""
    state = spaces.Dict({"privileged": spaces.Box(-1, 1, (3,)), "contacts": spaces.Box(0, 1, (2,))})
    policy = [{"name": "net", "input": "OBSERVATIONS", "layers": [8], "activations": "elu"}]
    value = [{"name": "critic", "input": 'STATES["privileged"]', "layers": [6], "activations": "elu"}]
    spec = network.parse({"policy": {"network": policy}, "value": {"network": value}})
    model = sfp_models.build_models(spec, BOX1, BOX1, CPU, state_space=state)["policy"]
    assert model.value_trunk.net.blocks["critic"][0].in_features == 3
    states = torch.tensor([[1.0, 0.0, 0.5, -0.5, 0.25], [0.0, 1.0, 0.5, -0.5, 0.25]])  # sorted keys: contacts first
    values, _ = model.compute({"observations": torch.zeros(2, 1), "states": states}, role="value")
    assert torch.equal(values[0], values[1])  # only the privileged entry is read, and it is the same in both rows


def test_input_expressions_of_isaac_lab_configs():
    """Dict observations indexed by key, concatenation of a container with a raw input, one-hot encoding."""
    obs = spaces.Dict({"camera": spaces.Box(0, 1, (8, 8, 3)), "joint-velocities": spaces.Box(-1, 1, (2,))})
    trunk = [
        {
            "name": "features_extractor",
            "input": 'permute(OBSERVATIONS["camera"], (0, 3, 1, 2))',
            "layers": [{"conv2d": [4, 3, 2]}, "flatten"],
            "activations": "relu",
        },
        {
            "name": "net",
            "input": 'concatenate([features_extractor, OBSERVATIONS["joint-velocities"]])',
            "layers": [16],
            "activations": "elu",
        },
    ]
    spec = network.parse(
        {"policy": {"network": trunk, "output": "ACTIONS"}, "value": {"network": trunk, "output": "ONE"}}
    )
    model = sfp_models.build_models(spec, obs, BOX1, CPU)["policy"]
    flat = torch.randn(3, gymnasium.spaces.flatdim(obs))
    assert model.compute({"observations": flat}, role="policy")[0].shape == (3, 1)
    assert model.policy_trunk.trunk.net.blocks["net"][0].in_features == 4 * 3 * 3 + 2

    one_hot = [{"name": "net", "input": "one_hot_encoding(OBSERVATION_SPACE, OBSERVATIONS)", "layers": [8]}]
    spec = network.parse({"policy": {"network": one_hot}, "value": {"network": one_hot}})
    model = sfp_models.build_models(spec, spaces.Discrete(5), BOX1, CPU)["policy"]
    assert model.policy_trunk.trunk.net.blocks["net"][0].in_features == 5
    assert model.compute({"observations": torch.tensor([[1.0], [4.0]])}, role="value")[0].shape == (2, 1)


@pytest.mark.parametrize(
    ("container", "message"),
    [
        ({"name": "net", "input": "__import__('os').getcwd()", "layers": [8]}, "not supported"),
        ({"name": "net", "input": "OBSERVATIONS.sum()", "layers": [8]}, "not supported"),
        ({"name": "net", "input": "later", "layers": [8]}, "later"),
        ({"name": "net", "input": "OBSERVATIONS", "layers": [{"lstm": 8}]}, "lstm"),
        ({"name": "net", "input": "OBSERVATIONS", "layers": [8], "activations": "swish"}, "swish"),
        ({"name": "net", "input": "STATES", "layers": [8]}, "no states"),
        ({"name": "net", "input": "OBSERVATIONS", "layers": [{"conv2d": [4, 3]}]}, "conv2d"),
    ],
)
def test_specs_it_cannot_build_are_refused_in_one_line(container, message):
    with pytest.raises(NetworkSpecError, match=message) as error:
        spec = network.parse({"policy": {"network": [container]}, "value": {"network": [container]}})
        sfp_models.build_models(spec, spaces.Box(-1, 1, (4,)), BOX1, CPU)
    assert "\n" not in str(error.value)


def test_a_class_that_does_not_fit_the_action_space_is_refused():
    spec = network.parse(
        {
            "policy": {"class": "CategoricalMixin", "network": [{"name": "n", "input": "OBSERVATIONS", "layers": [8]}]},
            "value": {"network": [{"name": "n", "input": "OBSERVATIONS", "layers": [8]}]},
        }
    )
    with pytest.raises(NetworkSpecError, match="Discrete action space"):
        sfp_models.build_models(spec, spaces.Box(-1, 1, (4,)), BOX1, CPU)


def test_plain_mlp_specs_are_recognised():
    mlp = [{"name": "net", "input": "OBSERVATIONS", "layers": [32, 32], "activations": "elu"}]
    spec = network.parse({"policy": {"network": mlp, "initial_log_std": 0.0}, "value": {"network": mlp}})
    assert network.plain_mlp(spec) == ([32, 32], "elu")
    discrete = network.parse({"policy": {"class": "CategoricalMixin", "network": mlp}, "value": {"network": mlp}})
    assert network.plain_mlp(discrete) is None
    camera = network.parse(CAMERA_MODELS)
    assert network.plain_mlp(camera) is None


def test_isaac_lab_3s_mlp_with_skrls_log_std_bounds_spelled_out_is_the_plain_mlp():
    """Isaac Lab 3.0.0's skrl_direct_ppo_cfg.yaml (Isaac-Cartpole-Direct) writes GaussianMixin's defaults out:
    ``clip_log_std: True, min_log_std: -20.0, max_log_std: 2.0``. Before, that made it "not plain": it trained
    through the spec builder instead of the tuned MLP models (the tier's upstream-settings test failed)."""
    mlp = [{"name": "net", "input": "OBSERVATIONS", "layers": [32, 32], "activations": "elu"}]
    policy = {"class": "GaussianMixin", "clip_actions": False, "clip_log_std": True, "network": mlp}
    policy |= {"min_log_std": -20.0, "max_log_std": 2.0, "initial_log_std": 0.0, "output": "ACTIONS"}
    value = {"class": "DeterministicMixin", "clip_actions": False, "network": mlp, "output": "ONE"}
    assert network.plain_mlp(network.parse({"separate": False, "policy": policy, "value": value})) == ([32, 32], "elu")
    for other in ({"max_log_std": 1.0}, {"min_log_std": -5.0}, {"clip_log_std": False}):
        spec = network.parse({"separate": False, "policy": {**policy, **other}, "value": value})
        assert network.plain_mlp(spec) is None, other


def test_a_spec_model_survives_deepcopy_and_state_dict_round_trip():
    spec = network.parse(CAMERA_MODELS)
    model = sfp_models.build_models(spec, CAMERA_OBS, BOX1, CPU)["policy"]
    x = torch.randn(2, 6 * 48 * 48)
    model.act({"observations": x}, role="policy")  # leaves a distribution holding a graph
    twin = copy.deepcopy(model)
    fresh = sfp_models.build_models(spec, CAMERA_OBS, BOX1, CPU)["policy"]
    fresh.load_state_dict(twin.state_dict())
    with torch.no_grad():
        assert torch.equal(
            model.compute({"observations": x}, role="value")[0], fresh.compute({"observations": x}, role="value")[0]
        )
