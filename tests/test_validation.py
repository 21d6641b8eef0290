"""Every config key is validated before any simulation starts, with a message naming key, value and rule.

The audit walks the keys of the shipped configs themselves (cfg/config.yaml, cfg/train/*.yaml,
cfg/task/*.yaml), so a key added there without validation fails here.
"""

import copy

import pytest
from omegaconf import OmegaConf

import omni_sfp.run.runner as runner_module
from omni_sfp.run.compose import ConfigError, load_config, validate
from omni_sfp.train import main

EMBEDDED = ("Cartpole", "CartpolePositions", "LQR60x8", "ConstantCost")


def leaves(cfg, prefix=""):
    for key, value in cfg.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from leaves(value, path + ".")
        else:
            yield path, value


def wrong_type(value):
    """A value of another type than ``value``."""
    if isinstance(value, str):
        return 12
    if value is None:  # null-able keys (int or null, str or null): a list is neither
        return [1]
    return "abc"  # bool, int, float, list: a string


@pytest.mark.parametrize("task", EMBEDDED)
def test_every_shipped_key_refuses_a_value_of_the_wrong_type_by_name(task):
    """validate() on the composed default with one leaf replaced (Hydra's override parsing is exercised by
    the table below; composing once per key would cost a second per dozen keys)."""
    default = load_config([f"task={task}"])
    checked = 0
    for key, value in leaves(OmegaConf.to_container(default, resolve=True)):
        if key == "task.name" or task != "Cartpole" and not key.startswith("task."):
            continue  # train/* and config.yaml keys are the same for every task: audited once, with Cartpole
        cfg = copy.deepcopy(default)
        bad = wrong_type(value)
        OmegaConf.update(cfg, key, bad)
        with pytest.raises(ConfigError) as error:
            validate(cfg)
        message = str(error.value)
        assert key in message and repr(bad) in message, (key, message)
        checked += 1
    assert checked >= (40 if task == "Cartpole" else 5)


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["num_envs=0"], "num_envs=0: must be >= 1"),
        (["task.env.num_envs=0", "num_envs=null"], "task.env.num_envs=0: must be >= 1"),
        (["seed=-2"], "seed=-2: must be >= -1"),
        (["seed=2147483648"], "seed=2147483648: must be <= 2147483647"),
        (["train.ppo.learning_rate=inf"], "train.ppo.learning_rate=inf: must be finite"),
        (["device=cuda:x"], "device='cuda:x': must be auto, cpu, cuda or cuda:N"),
        (["experiment=a/b"], "experiment='a/b': must be a folder-name suffix"),
        (["task_name=Other"], "task_name='Other': read-only"),
        (["max_iterations=0"], "max_iterations=0: must be >= 1"),
        (["test_episodes=0"], "test_episodes=0: must be >= 1"),
        (["test=true"], "test=true needs checkpoint"),
        (["resume=true"], "resume=true needs checkpoint"),
        (["resume=true", "test=true", "checkpoint=x"], "pick one"),
        (["train.models.units=[64,0]"], "train.models.units=[64, 0]: must be a non-empty list of positive integers"),
        (["train.models.activation=swish"], "train.models.activation='swish': must be one of elu, relu"),
        (
            ["train.sfp.cache_check=sometimes"],
            "train.sfp.cache_check='sometimes': must be one of identity, content, auto",
        ),
        (["train.check_finite=maybe"], "train.check_finite='maybe': must be one of raise, skip, off"),
        (["train.check_finite=true"], "train.check_finite=True: must be one of raise, skip, off"),
        (["train.ppo.rollouts=0"], "train.ppo.rollouts=0: must be >= 1"),
        (["train.ppo.learning_epochs=0"], "train.ppo.learning_epochs=0: must be >= 1"),
        (["train.ppo.mini_batches=0"], "train.ppo.mini_batches=0: must be >= 1"),
        (["train.ppo.mini_batches=7"], "num_envs * rollouts = 512 * 64 = 32768 is not divisible by it"),
        (["train.ppo.discount_factor=1.5"], "train.ppo.discount_factor=1.5: must be <= 1"),
        (["train.ppo.gae_lambda=-0.1"], "train.ppo.gae_lambda=-0.1: must be >= 0"),
        (["train.ppo.learning_rate=0"], "train.ppo.learning_rate=0: must be > 0"),
        (["train.ppo.learning_rate_schedule=cosine"], "must be one of kl_adaptive, fixed"),
        (["train.ppo.desired_kl=0"], "train.ppo.desired_kl=0: must be > 0 with learning_rate_schedule=kl_adaptive"),
        (["train.ppo.ratio_clip=0"], "train.ppo.ratio_clip=0: must be > 0"),
        (["train.ppo.value_clip=-1"], "train.ppo.value_clip=-1: must be >= 0"),
        (["train.ppo.grad_norm_clip=-1"], "train.ppo.grad_norm_clip=-1: must be >= 0"),
        (["train.ppo.rewards_scale=0"], "train.ppo.rewards_scale=0: must be > 0"),
        (["train.checkpoint_interval=-1"], "train.checkpoint_interval=-1: must be >= 0"),
        (["train.keep_checkpoints=0"], "train.keep_checkpoints=0: must be >= 1"),
        (["+train.ppo.lerning_rate=1"], "'train.ppo.lerning_rate' is not a configuration key"),
        (["+seeed=1"], "'seeed' is not a configuration key"),
        (["task=Cartpol"], "did you mean 'Cartpole'"),
        (["task.env.reset_distance=2"], "Could not override 'task.env.reset_distance'"),  # Hydra: not in the file
        (["+task.env.gravity=2"], "task.env.gravity=2: Cartpole takes no such argument"),
        (["task.env.validate_actions=1"], "task.env.validate_actions=1: expected bool"),
        (["task.env.max_episode_length=0"], "task.env (Cartpole): max_episode_length must be at least 1, got 0"),
        (["task=LQR60x8", "task.env.action_cost=0"], "task.env (LQR60x8): action_cost must be positive"),
        (["task=ConstantCost", "task.env.substeps=0"], "task.env (ConstantCost): substeps must be at least 1, got 0"),
        (["presets=dict_box"], "presets=dict_box: Isaac Lab's selector tokens (presets=, physics=, renderer=)"),
        (["physics=physx", "task=gym:CartPole-v1"], "task 'gym:CartPole-v1' is not an Isaac Lab task (gymnasium)"),
        (["renderer=rtx", "task=LQR60x8"], "task 'LQR60x8' is not an Isaac Lab task (embedded)"),
        (["presets=a,b"], "presets=a,b: Isaac Lab's"),  # one value (Isaac Lab's list), not a sweep of two
        (["presets=a b"], "presets='a b': must be NAME[,NAME...]"),
        (["physics='a,b'"], "must be one preset name"),
    ],
)
def test_values_out_of_range_are_refused_naming_key_value_and_what_is_allowed(overrides, expected):
    with pytest.raises(ConfigError) as error:
        load_config(overrides)
    assert expected in str(error.value)


def test_kl_early_stop_is_refused_in_a_multi_process_run(monkeypatch):
    load_config(["train.ppo.kl_threshold=0.05"])  # fine in one process
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match=r"train.ppo.kl_threshold=0.05: must be 0 in a multi-process run"):
        load_config(["train.ppo.kl_threshold=0.05"])


def test_the_shipped_configs_are_valid():
    for task in EMBEDDED:
        cfg = load_config([f"task={task}"])
        assert cfg.train.check_finite == "raise"


def test_bad_input_stops_before_any_environment_is_built(monkeypatch, capsys):
    def no_env(*args, **kwargs):
        raise AssertionError("an environment was built for a bad config")

    monkeypatch.setattr(runner_module, "make_env", no_env)
    for bad in (["train.ppo.gae_lambda=2"], ["task.env.max_effort=abc"], ["checkpoint=/no/such/run"]):
        assert main(bad) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("omni_sfp.train: error:") and "\n" not in err


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["train.ppo.rollouts=24"], "rollouts (24) must be a multiple of the recurrent network's sequence_length (16)"),
        (["train.models.network.rnn.class=RNN"], "rnn.class: 'RNN' is not one of LSTM, GRU"),
        (["train.models.network.rnn.sequence_length=0"], "sequence_length: 0 is not a positive integer"),
    ],
)
def test_a_recurrent_network_that_cannot_train_is_refused_before_any_environment(
    overrides, expected, monkeypatch, capsys
):
    def no_env(*args, **kwargs):
        raise AssertionError("an environment was built for a bad config")

    monkeypatch.setattr(runner_module, "make_env", no_env)
    assert main(["task=CartpolePositions", *overrides]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("omni_sfp.train: error:") and "\n" not in err and expected in err


def test_a_recurrent_step_refuses_capture_in_one_line(tmp_path, capsys):
    tiny = ["task=CartpolePositions", "task.env.num_envs=4", "train.max_iterations=1", f"runs_dir={tmp_path}"]
    assert main([*tiny, "train.capture=true"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "a recurrent model's step runs eagerly" in err
