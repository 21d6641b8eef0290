"""Non-finite observations, rewards and losses: caught at the env step and env index where they appear.

A Cartpole that injects one NaN at a chosen env step and env index drives the real training loop
(omni_sfp.ppo.loop.Learner + SFPPPO, built as the runner builds them); ``train.check_finite`` decides what happens.
"""

import math

import pytest
import torch

from omni_sfp.envs.embedded import EmbeddedEnvWrapper
from omni_sfp.ppo.agent import NonFiniteError
from omni_sfp.ppo.loop import Learner
from omni_sfp.run.compose import load_config
from omni_sfp.run.runner import build_agent, build_models
from omni_sfp.tasks.cartpole import Cartpole
from omni_sfp.train import main

NUM_ENVS, ROLLOUTS = 8, 8
SMALL = [
    "task=Cartpole",
    f"num_envs={NUM_ENVS}",
    "train.models.units=[16,16]",
    f"train.ppo.rollouts={ROLLOUTS}",
    "train.ppo.mini_batches=2",
    "train.ppo.learning_epochs=2",
    "task.env.max_episode_length=20",
]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class NaNCartpole(Cartpole):
    """Cartpole whose ``step`` number ``at_step`` (0-based, counted from construction) returns a NaN in
    ``quantity`` ("rewards" or "observations") for env ``env``; the state itself stays finite."""

    def __init__(self, *args, at_step: int, env: int, quantity: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.at_step, self.env, self.quantity, self.steps = at_step, env, quantity, 0

    def step(self, actions):
        observations, rewards, terminated, truncated, info = super().step(actions)
        if self.steps == self.at_step:
            if self.quantity == "rewards":
                rewards = rewards.clone()
                rewards[self.env] = math.nan
            else:
                observations = observations.clone()
                observations[self.env, 2] = math.nan
        self.steps += 1
        return observations, rewards, terminated, truncated, info


def make(check_finite: str, iterations: int, *, validate_actions: bool = True, **nan):
    cfg = load_config([*SMALL, f"train.check_finite={check_finite}", f"max_iterations={iterations}"])
    env = EmbeddedEnvWrapper(
        NaNCartpole(NUM_ENVS, "cpu", 0, max_episode_length=20, validate_actions=validate_actions, **nan)
    )
    models = build_models(cfg, env, torch.device("cpu"))
    agent = build_agent(cfg, env, models, torch.device("cpu"), run_dir=None)
    history = []
    learner = Learner(env, agent, iterations=iterations, log=lambda progress, losses: history.append(progress))
    return agent, learner, history


def parameters(agent):
    return [p.detach().clone() for p in agent.policy.parameters()]


@pytest.mark.parametrize(
    "quantity, validate_actions", [("rewards", True), ("observations", False), ("observations", True)]
)
def test_raise_names_the_env_step_env_index_and_quantity_and_leaves_the_model_untouched(quantity, validate_actions):
    step, env = 13, 5  # iteration 2, step 6 of 8 in its rollout
    agent, learner, history = make(
        "raise", 3, validate_actions=validate_actions, at_step=step, env=env, quantity=quantity
    )
    with pytest.raises(NonFiniteError) as error:
        learner.learn()
    message = str(error.value)
    where = f"at env step {step} (iteration 2, step 6 of 8 in the rollout), env index {env}"
    assert f"non-finite {quantity} {where}" in message
    if validate_actions and quantity == "observations":
        # the task refused the NaN actions computed from the observation at the next step; the report names
        # the observation, where it started, and the task's own complaint
        assert "actions contain NaN" in message
    assert len(history) == 1  # iteration 1 finished; iteration 2's update never ran
    assert all(torch.isfinite(p).all() for p in parameters(agent))


def test_skip_drops_that_rollouts_update_counts_it_and_training_goes_on():
    agent, learner, history = make("skip", 4, at_step=13, env=5, quantity="rewards")
    before = {}
    update = agent.update

    def recording_update(*, timestep, timesteps):
        before[timestep // ROLLOUTS + 1] = parameters(agent)
        update(timestep=timestep, timesteps=timesteps)

    agent.update = recording_update
    learner.learn()
    assert [p.skipped_updates for p in history] == [0, 1, 1, 1]
    assert "non-finite rewards at env step 13" in agent.last_skip_reason
    after_skip = before[3]  # the parameters when iteration 3's update starts: iteration 2's update was dropped
    assert all(torch.equal(a, b) for a, b in zip(before[2], after_skip))
    assert not all(torch.equal(a, b) for a, b in zip(before[3], parameters(agent)))  # later updates ran
    assert all(torch.isfinite(p).all() for p in parameters(agent))


@pytest.mark.parametrize("check_finite", ["raise", "skip"])
def test_a_non_finite_loss_raises_or_rolls_the_whole_update_back(check_finite):
    agent, learner, history = make(check_finite, 3, at_step=-1, env=0, quantity="rewards")  # data stay finite
    update = agent.update
    snapshots = {}

    def poisoned_update(*, timestep, timesteps):  # iteration 2: a NaN loss scale, so every loss is NaN
        iteration = timestep // ROLLOUTS + 1
        scale = agent.cfg.value_loss_scale
        agent.cfg.value_loss_scale = math.nan if iteration == 2 else scale
        snapshots[iteration] = (
            {k: v.clone() for k, v in agent.policy.state_dict().items()},
            [g["lr"] for g in agent.optimizer.param_groups],
        )
        try:
            update(timestep=timestep, timesteps=timesteps)
        finally:
            agent.cfg.value_loss_scale = scale
        snapshots[(iteration, "after")] = (
            {k: v.clone() for k, v in agent.policy.state_dict().items()},
            [g["lr"] for g in agent.optimizer.param_groups],
        )

    agent.update = poisoned_update
    if check_finite == "raise":
        with pytest.raises(NonFiniteError, match=r"non-finite loss in the update after env step 15 \(iteration 2\)"):
            learner.learn()
        return
    learner.learn()
    assert agent.skipped_updates == 1 and "non-finite loss" in agent.last_skip_reason
    state, lr = snapshots[2]
    state_after, lr_after = snapshots[(2, "after")]
    assert all(torch.equal(state[k], state_after[k]) for k in state) and lr == lr_after  # rolled back, bitwise
    assert all(torch.isfinite(v).all() for v in agent.policy.state_dict().values())
    assert [p.skipped_updates for p in history] == [0, 1, 1]


def test_off_checks_nothing():
    agent, learner, history = make("off", 2, at_step=13, env=5, quantity="rewards")
    learner.learn()
    assert len(history) == 2 and agent.skipped_updates == 0


def test_the_cli_stops_with_one_line_and_exit_code_1(monkeypatch, tmp_path, capsys):
    import omni_sfp.run.runner as runner_module

    def nan_env(name, *, num_envs, device, seed, headless, task_cfg):
        return EmbeddedEnvWrapper(NaNCartpole(num_envs, device, seed, at_step=3, env=2, quantity="rewards", **task_cfg))

    monkeypatch.setattr(runner_module, "make_env", nan_env)
    assert main([*SMALL, "max_iterations=2", f"runs_dir={tmp_path}"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert "non-finite rewards at env step 3 (iteration 1, step 4 of 8 in the rollout), env index 2" in err
    assert "last checkpoint: none written yet" in err


def test_first_nonfinite_orders_by_step_then_quantity_then_env():
    from omni_sfp.ppo.agent import first_nonfinite

    observations, rewards = torch.zeros(4, 6, 3), torch.zeros(4, 6, 1)
    assert first_nonfinite(observations=observations, rewards=rewards) is None
    rewards[3, 0] = math.inf
    assert first_nonfinite(observations=observations, rewards=rewards) == (3, 0, "rewards")
    rewards[2, 4] = math.nan
    observations[2, 5, 1] = -math.inf
    assert first_nonfinite(observations=observations, rewards=rewards) == (2, 5, "observations")
    assert first_nonfinite(rewards=rewards, observations=observations) == (2, 4, "rewards")
