"""SFPPPO with a recurrent model against skrl 2.1.1's ``PPO_RNN``, on the same model and data, bit for bit.

As tests/test_agent.py pins the feed-forward update to skrl's ``PPO``: both agents run on identical seeds, models
(:mod:`omni_sfp.sfp.recurrent`, which speaks skrl's RNN protocol, so skrl's own agent drives it unchanged) and
settings, on an env whose episodes end at random steps of each env, inside training sequences. The rollout's hidden
states, the sequences, the reset masks and the minibatch order must be skrl's, so every loss and every parameter
after three updates must be *bitwise* equal. The update is pinned on the same rollout in both agents' memories:
skrl's own rollout stores other hidden states (test_the_rollout_stores_the_hidden_states_each_step_started_from). ``time_limit_bootstrap`` is off: there ``PPO_RNN`` cuts GAE at
terminations only, ours cuts at truncations too (our PPO's, documented in omni_sfp/ppo/agent.py).
"""

from __future__ import annotations

import copy
import math

import gymnasium
import pytest
import torch
from ppo_driver import make_agent
from skrl.agents.torch.ppo import PPO_RNN
from skrl.resources.preprocessors.torch import RunningStandardScaler
from skrl.resources.schedulers.torch import KLAdaptiveLR

from omni_sfp.config.schema import ConfigError
from omni_sfp.ppo.agent import SFPPPO
from omni_sfp.ppo.minibatches import sequence_order
from omni_sfp.sfp import models as sfp_models
from omni_sfp.sfp import network

OBS, ACT, ENVS = 6, 2, 8
BOX_OBS = gymnasium.spaces.Box(-10, 10, (OBS,))
BOX_ACT = gymnasium.spaces.Box(-1, 1, (ACT,))
SETTINGS = {
    "rollouts": 8,
    "learning_epochs": 3,
    "mini_batches": 4,
    "learning_rate": 1e-3,
    "learning_rate_scheduler": KLAdaptiveLR,
    "learning_rate_scheduler_kwargs": {"kl_threshold": 0.008},
    "observation_preprocessor": RunningStandardScaler,
    "observation_preprocessor_kwargs": {"size": BOX_OBS, "device": "cpu"},
    "value_preprocessor": RunningStandardScaler,
    "value_preprocessor_kwargs": {"size": 1, "device": "cpu"},
    "grad_norm_clip": 0.5,
    "value_clip": 0.2,
    "entropy_loss_scale": 0.01,
    "value_loss_scale": 2.0,
    "time_limit_bootstrap": False,
    "rewards_shaper": lambda rewards, timestep, timesteps: rewards * 0.1,
}


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def spec(
    cls: str = "LSTM", *, before_mlp: bool = True, concat_input: bool = False, length: int = 4, separate=False, **rnn
):
    net = [{"name": "net", "input": "OBSERVATIONS", "layers": [16], "activations": "elu"}]
    return network.parse(
        {
            "separate": separate,
            "rnn": {"class": cls, "hidden_size": 8, "sequence_length": length, "before_mlp": before_mlp,
                    "concat_input": concat_input, **rnn},
            "policy": {"class": "GaussianMixin", "network": net},
            "value": {"class": "DeterministicMixin", "network": net},
        }
    )  # fmt: skip


def make_models(cls: str = "LSTM", cache_check: str = "auto", **options) -> dict:
    torch.manual_seed(7)
    return sfp_models.build_models(
        spec(cls, **options), BOX_OBS, BOX_ACT, torch.device("cpu"), num_envs=ENVS, cache_check=cache_check
    )


class EndingEnv:
    """x' = 0.9 x + 0.1 [a, a, a] + noise; reward -|x|^2; each env's episode terminates or truncates at random
    steps (a seeded generator), so resets fall inside the training sequences."""

    def __init__(self, seed: int):
        self.generator = torch.Generator().manual_seed(seed)
        self.x = torch.randn(ENVS, OBS, generator=self.generator)

    def step(self, actions: torch.Tensor):
        self.x = (
            0.9 * self.x
            + 0.1 * actions.repeat(1, OBS // ACT)
            + 0.1 * torch.randn(self.x.shape, generator=self.generator)
        )
        rewards = -(self.x**2).sum(-1, keepdim=True)
        ends = torch.rand(ENVS, 2, generator=self.generator)
        terminated, truncated = ends[:, :1] < 0.15, ends[:, 1:] < 0.1
        next_obs = self.x.clone()
        reset = (terminated | truncated).squeeze(-1)
        self.x[reset] = torch.randn(int(reset.sum()), OBS, generator=self.generator)
        return next_obs, rewards, terminated, truncated  # fmt: skip


def rollout(agent, env: EndingEnv, obs: torch.Tensor, start: int, steps: int, *, update: bool = True):
    """``agent.cfg.rollouts`` steps from ``obs`` (skrl's trainer's calls); the last observations and the episode
    ends of each step."""
    ends = []
    for t in range(start, start + agent.cfg.rollouts):
        with torch.no_grad():
            actions, _ = agent.act(obs, None, timestep=t, timesteps=steps)
            next_obs, rewards, terminated, truncated = env.step(actions)
            ends.append((terminated | truncated).squeeze(-1))
            agent.record_transition(
                observations=obs, states=None, actions=actions, rewards=rewards, next_observations=next_obs,
                next_states=None, terminated=terminated, truncated=truncated, infos={}, timestep=t, timesteps=steps,
            )  # fmt: skip
        if update:
            agent.post_interaction(timestep=t, timesteps=steps)
        obs = next_obs
    return obs, torch.stack(ends)


def train(agent_class, models: dict, updates: int, **settings):
    agent = make_agent(models, agent_class=agent_class, num_envs=ENVS, **{**SETTINGS, **settings})
    env = EndingEnv(seed=3)
    torch.manual_seed(11)
    obs, ends = env.x.clone(), []
    for update in range(updates):
        obs, more = rollout(agent, env, obs, update * agent.cfg.rollouts, updates * agent.cfg.rollouts)
        ends.append(more)
    return agent, torch.cat(ends)


def pinned(models: dict, updates: int):
    """Our agent collects each rollout; skrl's ``PPO_RNN`` gets a copy of it (memory, last observations, hidden
    states); both update. The losses each tracked and both agents."""
    ours = make_agent(copy.deepcopy(models), agent_class=SFPPPO, num_envs=ENVS, **SETTINGS)
    theirs = make_agent(copy.deepcopy(models), agent_class=PPO_RNN, num_envs=ENVS, **SETTINGS)
    env = EndingEnv(seed=3)
    torch.manual_seed(11)
    obs, tracked, ends = env.x.clone(), [], []
    steps = updates * ours.cfg.rollouts
    for update in range(updates):
        obs, more = rollout(ours, env, obs, update * ours.cfg.rollouts, steps, update=False)
        ends.append(more)
        policy, value = ours._rnn_roles["policy"], ours._rnn_roles["value"]
        for name, tensor in ours.memory.tensors.items():
            if name.startswith("rnn_"):  # ours: the policy's states, then a separate value's; skrl's names them
                i = int(name[4:])
                separate = ours.value is not ours.policy and i >= value.start
                name = f"rnn_value_{i - value.start}" if separate else f"rnn_policy_{i}"
            theirs.memory.tensors[name].copy_(tensor)
        theirs._current_next_observations, theirs._current_next_states = ours._current_next_observations, None
        theirs._rnn_initial_states = {"policy": ours._rnn_states[policy], "value": ours._rnn_states[value]}
        ours.update(timestep=steps, timesteps=steps)
        theirs.enable_models_training_mode(True)
        theirs.update(timestep=steps, timesteps=steps)
        theirs.enable_models_training_mode(False)
        tracked.append([{k: list(v) for k, v in agent.tracking_data.items()} for agent in (ours, theirs)])
        for agent in (ours, theirs):
            agent.tracking_data.clear()
        ours._rollout = 0
    return ours, theirs, tracked, torch.cat(ends)


def flat_parameters(agent, role: str = "policy") -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in getattr(agent, role).parameters()])


@pytest.mark.parametrize(
    "cls, options",
    [
        ("LSTM", {}),
        ("GRU", {"before_mlp": False, "concat_input": True}),
        ("LSTM", {"concat_input": True, "num_layers": 2}),
        ("LSTM", {"separate": True}),  # two models, each with its hidden states: skrl's rnn_policy_* and rnn_value_*
    ],
)
def test_our_recurrent_update_is_skrl_ppo_rnns_bit_for_bit(cls, options):
    """The same rollout in memory: the same sequences, minibatches, resets, losses and parameters, bitwise."""
    ours, theirs, tracked, ends = pinned(make_models(cls, **options), updates=3)
    assert ends.reshape(6, 4, ENVS)[:, :-1].any(), "no episode ended inside a sequence: resets were not exercised"
    for update, (mine, their) in enumerate(tracked):
        for tag in ("Loss / Policy loss", "Loss / Value loss", "Loss / Entropy loss", "Policy / Standard deviation"):
            assert mine[tag] == their[tag], f"update {update}: {tag} {mine[tag]} != skrl's {their[tag]}"
    assert torch.equal(flat_parameters(ours), flat_parameters(theirs))
    if ours.value is not ours.policy:
        assert torch.equal(flat_parameters(ours, "value"), flat_parameters(theirs, "value"))
    assert ours.optimizer.param_groups[0]["lr"] == theirs.optimizer.param_groups[0]["lr"]
    for name in ("observation_preprocessor", "value_preprocessor"):
        mine, their = ours.checkpoint_modules[name].state_dict(), theirs.checkpoint_modules[name].state_dict()
        assert all(torch.equal(mine[key], their[key]) for key in their), name


def test_the_rollout_stores_the_hidden_states_each_step_started_from():
    """Row t+1 of the memory is the policy's state after step t, zeroed where that step ended an episode. (skrl
    2.1.1's ``PPO_RNN`` stores, from its second step on, the state *after* each step: its ``_rnn_initial_states``
    becomes the very dict its act writes the new states into. It acts with the right states; it trains each
    sequence from the state after the sequence's first step. Ours stores what the step started from.)"""
    agent = make_agent(make_models(), agent_class=SFPPPO, num_envs=ENVS, **SETTINGS)
    env = EndingEnv(seed=3)
    _, ends = rollout(agent, env, env.x.clone(), 0, 8, update=False)  # the normaliser as the rollout used it
    memory, model = agent.memory, agent.policy
    observations = agent._observation_preprocessor(memory.get_tensor_by_name("observations"))
    h, c = (memory.get_tensor_by_name(f"rnn_{i}").transpose(1, 2) for i in range(2))  # (steps, layers, envs, H)
    assert torch.equal(h[0], torch.zeros_like(h[0]))
    for t in range(7):
        with torch.no_grad():
            _, outputs = model.act({"observations": observations[t], "rnn": [h[t], c[t]]}, role="value")
        expected = torch.where(ends[t].reshape(1, -1, 1), 0.0, outputs["rnn"][0])
        assert torch.equal(h[t + 1], expected), t


def test_every_shareable_call_of_a_recurrent_run_is_served():
    """The rollout's value call (same observations, same hidden states) and each minibatch's value call (same
    sequences, hidden states and done masks) are hits; nothing else is."""
    agent, _ = train(SFPPPO, make_models(), updates=2)
    stats = agent.sfp_stats
    assert agent.shareable_calls == 2 * 8 + 2 * 3 * 4
    assert stats.hits == agent.shareable_calls
    assert agent.sfp_share_rate == 1.0


def test_the_cache_off_computes_every_call_and_trains_the_same():
    """A hit changes nothing: the double pass gives the same parameters up to summation order."""
    cached, _ = train(SFPPPO, make_models(), updates=2)
    double, _ = train(SFPPPO, make_models(cache_check="off"), updates=2)
    assert double.sfp_stats.hits == 0
    difference = (flat_parameters(cached) - flat_parameters(double)).abs().max().item()
    assert difference < 1e-5


def test_sequences_are_skrls_rows_env_by_env():
    assert sequence_order(3, 2).tolist() == [0, 2, 4, 1, 3, 5]
    from skrl.memories.torch import RandomMemory

    memory = RandomMemory(memory_size=8, num_envs=5)
    assert sequence_order(8, 5).tolist() == memory.all_sequence_indexes.tolist()


def test_hidden_states_are_zeroed_where_episodes_end_and_saved_with_the_agent():
    agent, ends = train(SFPPPO, make_models(), updates=1)
    last = ends[-1]
    state = agent.state_dict()
    fresh = make_agent(make_models(), agent_class=SFPPPO, num_envs=ENVS, **SETTINGS)
    fresh.load_state_dict(copy.deepcopy(state))
    assert all(torch.equal(a, b) for a, b in zip(fresh._rnn_states, agent._rnn_states))
    # the step after the update: where an episode ended at the last step, its state starts at zero
    agent.act(torch.randn(ENVS, OBS), None, timestep=8, timesteps=16)
    h = agent._rnn_states[0]
    assert torch.equal(h[:, last], torch.zeros_like(h[:, last])) or not last.any()


def test_rollouts_not_whole_sequences_are_refused_in_one_line():
    with pytest.raises(
        ConfigError, match=r"rollouts \(6\) must be a multiple of the recurrent network's sequence_length \(4\)"
    ):
        make_agent(make_models(), agent_class=SFPPPO, num_envs=ENVS, **{**SETTINGS, "rollouts": 6})  # fmt: skip


def test_mixed_precision_trains_a_recurrent_model_with_its_recurrent_layer_in_float32():
    """CPU bf16 autocast: oneDNN has no bf16 LSTM (it raised), so the recurrent layer runs in float32 and the hidden
    states stay float32 from step to step; the MLP and heads run under autocast as in any model."""
    agent, _ = train(SFPPPO, make_models(), updates=1, mixed_precision=True)
    assert all(state.dtype == torch.float32 for state in agent._rnn_states)
    assert agent.last_losses and all(map(math.isfinite, agent.last_losses.values()))
    assert agent.sfp_share_rate == 1.0
