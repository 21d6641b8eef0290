"""``python -m omni_sfp.bench pixels``: one PPO update of Isaac Lab's camera CNN, row against row.

The network is ``Isaac-Cartpole-Camera-Direct``'s registered skrl model (``skrl_direct_camera_ppo_cfg.yaml``:
conv2d 32/8/4, 64/4/2, 64/3/1, flatten, [512], shared by policy and value) on ``(6, 96, 96)`` images. The
registered PPO shape is 64 rollouts, 4 epochs and 32 minibatches; on 2 CPU cores one such update of 16 envs takes
minutes, so the preset keeps the minibatch size the registered run has at 16 envs (32 samples) and the number of
epochs, with fewer samples: 8 envs x 16 rollouts = 128 samples, 4 minibatches of 32 per epoch (``--envs``,
``--horizon``, ``--epochs``, ``--minibatch`` change it).

What is timed is the update alone, on the same synthetic rollout for every row (random images, actions, rewards;
no env: the rollout is not what differs between the rows). Rows, interleaved, medians of ``--repetitions``:

- ``omni-sfp``: our agent (:class:`omni_sfp.ppo.agent.SFPPPO`) with the spec-built shared model, the keyed cache on;
- ``omni-sfp double``: the same with ``cache_check=off``: each role runs the CNN (forward and backward);
- ``skrl built-in``: skrl 2.1.1's own PPO with its ``shared_model(single_forward_pass=True)`` from the same YAML
  (skrl's unkeyed single forward pass);
- ``rl_games network``: rl_games' ``A2CBuilder`` network from the equivalent ``cnn`` block, trained with the
  floor's loop (rl_games' agent needs its own env loop; its network computes mu, sigma and value in one call,
  rl_games' single forward pass by construction). Not in mixed precision: rl_games' ``mixed_precision`` is
  CUDA-only;
- ``floor``: the least work for the same update: one forward and one backward of the network per minibatch,
  the clipped PPO losses, one Adam step; no normaliser, no cache keys, no bookkeeping.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import gymnasium
import numpy as np
import torch
from torch import nn

IMAGE = (6, 96, 96)
CNN_LAYERS = [
    {"conv2d": {"out_channels": 32, "kernel_size": 8, "stride": 4, "padding": 0}},
    {"conv2d": {"out_channels": 64, "kernel_size": 4, "stride": 2, "padding": 0}},
    {"conv2d": {"out_channels": 64, "kernel_size": 3, "stride": 1, "padding": 0}},
    "flatten",
]
TRUNK = [
    {"name": "features_extractor", "input": "OBSERVATIONS", "layers": CNN_LAYERS, "activations": "relu"},
    {"name": "net", "input": "features_extractor", "layers": [512], "activations": "elu"},
]
MODELS = {  # the registered models section, as skrl's Runner reads it
    "separate": False,
    "policy": {"class": "GaussianMixin", "initial_log_std": 0.0, "network": TRUNK, "output": "ACTIONS"},
    "value": {"class": "DeterministicMixin", "network": TRUNK, "output": "ONE"},
}
RLGAMES_NETWORK = {  # the same network as rl_games' block (OmniIsaacGymEnvs' CartpoleCameraPPO.yaml), channel-first
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
        "permute_input": False,  # our images are channel-first already
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
ROWS = ("omni-sfp", "omni-sfp double", "skrl built-in", "rl_games network", "floor")


@dataclass(frozen=True)
class PixelWork:
    num_envs: int = 8
    horizon: int = 16
    epochs: int = 4
    minibatch_size: int = 32
    learning_rate: float = 1e-4
    ratio_clip: float = 0.2
    value_clip: float = 0.2

    @property
    def samples(self) -> int:
        return self.num_envs * self.horizon

    @property
    def mini_batches(self) -> int:
        return self.samples // self.minibatch_size


def _spaces():
    observation = gymnasium.spaces.Box(-np.inf, np.inf, IMAGE, dtype=np.float32)
    action = gymnasium.spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)
    return observation, action


def _rollout(work: PixelWork, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    shape = (work.horizon, work.num_envs)
    return {
        "observations": torch.rand(*shape, int(np.prod(IMAGE)), generator=generator),
        "actions": torch.randn(*shape, 1, generator=generator).clamp(-1, 1),
        "rewards": torch.randn(*shape, 1, generator=generator),
        "log_prob": -torch.rand(*shape, 1, generator=generator),
        "values": torch.randn(*shape, 1, generator=generator),
        "terminated": torch.zeros(*shape, 1, dtype=torch.bool),
        "truncated": torch.zeros(*shape, 1, dtype=torch.bool),
        "next": torch.rand(work.num_envs, int(np.prod(IMAGE)), generator=generator),
    }


def _ppo_cfg(work: PixelWork, mixed: bool):
    from skrl.agents.torch.ppo import PPO_CFG
    from skrl.resources.preprocessors.torch import RunningStandardScaler

    cfg = PPO_CFG(
        rollouts=work.horizon,
        learning_epochs=work.epochs,
        mini_batches=work.mini_batches,
        learning_rate=work.learning_rate,
        ratio_clip=work.ratio_clip,
        value_clip=work.value_clip,
        grad_norm_clip=1.0,
        value_preprocessor=RunningStandardScaler,  # the camera config's: values yes, images no
        value_preprocessor_kwargs={"size": 1, "device": "cpu"},
        mixed_precision=mixed,
    )
    cfg.experiment.write_interval = 0
    cfg.experiment.checkpoint_interval = 0
    return cfg


def _fill(agent, rollout: dict[str, torch.Tensor]) -> None:
    for name in ("observations", "actions", "rewards", "log_prob", "values", "terminated", "truncated"):
        agent.memory.get_tensor_by_name(name).copy_(rollout[name])
    agent.memory.filled, agent.memory.memory_index = True, 0
    agent._current_next_observations = rollout["next"]
    agent._current_next_states = None


def _skrl_agent(work: PixelWork, mixed: bool, rollout, *, ours: bool, cache_check: str = "auto"):
    from skrl.memories.torch import RandomMemory

    observation, action = _spaces()
    memory = RandomMemory(memory_size=work.horizon, num_envs=work.num_envs, device="cpu")
    if ours:
        from omni_sfp.ppo.agent import SFPPPO
        from omni_sfp.sfp import network
        from omni_sfp.sfp.models import build_models

        spec = network.parse(MODELS)
        model = build_models(spec, observation, action, torch.device("cpu"), cache_check=cache_check)["policy"]
        agent = SFPPPO(
            models={"policy": model, "value": model},
            memory=memory,
            observation_space=observation,
            action_space=action,
            device="cpu",
            cfg=_ppo_cfg(work, mixed),
            check_finite="off",
        )
    else:
        from skrl.agents.torch.ppo import PPO
        from skrl.utils.model_instantiators.torch import shared_model

        parameters = [{k: v for k, v in MODELS[role].items() if k != "class"} for role in ("policy", "value")]
        model = shared_model(
            observation_space=observation,
            action_space=action,
            device="cpu",
            structure=["GaussianMixin", "DeterministicMixin"],
            roles=["policy", "value"],
            parameters=parameters,
            single_forward_pass=True,
        )
        with torch.no_grad():  # its lazy layers take their shapes from a first call
            model.act({"observations": rollout["next"][:1]}, role="policy")
            model.act({"observations": rollout["next"][:1]}, role="value")
        agent = PPO(
            models={"policy": model, "value": model},
            memory=memory,
            observation_space=observation,
            action_space=action,
            device="cpu",
            cfg=_ppo_cfg(work, mixed),
        )
    agent.init()

    def update() -> float:
        _fill(agent, rollout)
        agent.enable_models_training_mode(True)
        agent.update(timestep=work.horizon, timesteps=10**6)
        return agent.sfp_share_rate if ours and agent.shares_trunk else float("nan")

    return update


class _FloorModel(nn.Module):
    """The camera network as plain modules: CNN, [512], a mean head, a value head, a log std."""

    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Sequential(
            nn.Conv2d(6, 32, 8, 4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, 2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, 1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(64 * 8 * 8, 512),
            nn.ELU(),
        )
        self.mu, self.value = nn.Linear(512, 1), nn.Linear(512, 1)
        self.log_std = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor):
        features = self.trunk(x.view(-1, *IMAGE))
        return self.mu(features), self.log_std.expand(x.shape[0], 1), self.value(features)


class _RLGamesModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        import copy

        from rl_games.algos_torch.network_builder import A2CBuilder

        builder = A2CBuilder()
        builder.load(copy.deepcopy(RLGAMES_NETWORK))
        self.net = builder.build("a2c", actions_num=1, input_shape=IMAGE, num_seqs=1, value_size=1)

    def forward(self, x: torch.Tensor):
        mu, sigma, value, _ = self.net({"obs": x.view(-1, *IMAGE)})
        return mu, sigma, value


def _minimal_update(work: PixelWork, mixed: bool, rollout, model: nn.Module) -> Callable[[], float]:
    """One forward and backward per minibatch: clipped surrogate, clipped value loss, Adam; advantages once."""
    optimizer = torch.optim.Adam(model.parameters(), lr=work.learning_rate)
    observations = rollout["observations"].flatten(0, 1)
    actions = rollout["actions"].flatten(0, 1)
    old_log_prob = rollout["log_prob"].flatten(0, 1)
    old_values = rollout["values"].flatten(0, 1)
    returns = old_values + rollout["rewards"].flatten(0, 1)
    advantages = returns - old_values
    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

    def update() -> float:
        for _ in range(work.epochs):
            order = torch.randperm(work.samples)
            for batch in order.split(work.minibatch_size):
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mixed):
                    mean, log_std, value = model(observations[batch])
                    distribution = torch.distributions.Normal(mean.float(), log_std.float().exp())
                    ratio = torch.exp(distribution.log_prob(actions[batch]) - old_log_prob[batch])
                    surrogate = advantages[batch] * ratio
                    clipped = advantages[batch] * ratio.clamp(1 - work.ratio_clip, 1 + work.ratio_clip)
                    policy_loss = -torch.min(surrogate, clipped).mean()
                    predicted = old_values[batch] + (value.float() - old_values[batch]).clamp(
                        -work.value_clip, work.value_clip
                    )
                    value_loss = (returns[batch] - predicted).square().mean()
                optimizer.zero_grad()
                (policy_loss + value_loss).backward()
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
        return float("nan")

    return update


def build_rows(work: PixelWork, mixed: bool, rows=ROWS, seed: int = 0) -> dict[str, Callable[[], float]]:
    rollout = _rollout(work, seed)
    torch.manual_seed(seed)
    makers = {
        "omni-sfp": lambda: _skrl_agent(work, mixed, rollout, ours=True),
        "omni-sfp double": lambda: _skrl_agent(work, mixed, rollout, ours=True, cache_check="off"),
        "skrl built-in": lambda: _skrl_agent(work, mixed, rollout, ours=False),
        "rl_games network": lambda: _minimal_update(work, mixed, rollout, _RLGamesModel()),
        "floor": lambda: _minimal_update(work, mixed, rollout, _FloorModel()),
    }
    return {row: makers[row]() for row in rows if not (mixed and row == "rl_games network")}


def run(work: PixelWork, repetitions: int, *, precisions=("fp32", "mixed"), rows=ROWS, log=print) -> dict:
    """Medians of interleaved timed updates, per precision and row (each row warmed up by one update)."""
    results: dict = {}
    for precision in precisions:
        updates = build_rows(work, precision == "mixed", rows)
        for update in updates.values():
            update()  # first calls, allocator, lazy state
        times: dict[str, list[float]] = {name: [] for name in updates}
        hits: dict[str, float] = {}
        for repetition in range(repetitions):
            for name, update in updates.items():
                start = time.perf_counter()
                rate = update()
                times[name].append(time.perf_counter() - start)
                hits[name] = rate
            log(f"[bench] pixels {precision}: repetition {repetition + 1}/{repetitions} done")
        results[precision] = {
            name: {"median_s": statistics.median(values), "times_s": values, "hit_rate": hits[name]}
            for name, values in times.items()
        }
    return results


def format_results(results: dict, work: PixelWork, repetitions: int) -> str:
    lines = [
        f"pixels preset: (6, 96, 96) images, {work.num_envs} envs x {work.horizon} rollouts = {work.samples} samples, "
        f"{work.epochs} epochs x {work.mini_batches} minibatches of {work.minibatch_size}; medians of {repetitions} "
        "interleaved updates",
        "",
        "| precision | row | s/update (median) | vs omni-sfp | cache hits |",
        "|---|---|---|---|---|",
    ]
    for precision, rows in results.items():
        ours = rows["omni-sfp"]["median_s"]
        for name, row in rows.items():
            rate = row["hit_rate"]
            shown = "-" if rate != rate else f"{100 * rate:.1f}%"  # NaN: no cache of ours at work in that row
            lines.append(f"| {precision} | {name} | {row['median_s']:.3f} | {row['median_s'] / ours:.2f}x | {shown} |")
    return "\n".join(lines)


def work_from(
    *, envs: int | None = None, horizon: int | None = None, epochs: int | None = None, minibatch: int | None = None
) -> PixelWork:
    """The preset's work with the given sizes over it.

    :raises ValueError: a minibatch that does not divide the rollout.
    """
    base = PixelWork()
    work = PixelWork(
        num_envs=envs or base.num_envs,
        horizon=horizon or base.horizon,
        epochs=epochs or base.epochs,
        minibatch_size=minibatch or base.minibatch_size,
    )
    if work.samples % work.minibatch_size:
        raise ValueError(f"--minibatch {work.minibatch_size} does not divide envs x horizon = {work.samples}")
    return work


def main(work: PixelWork, repetitions: int, out, stamp: str, log=print) -> int:
    """``python -m omni_sfp.bench pixels``: writes ``bench-pixels-<stamp>.md`` and ``.json`` into ``out``."""
    import json

    results = run(work, repetitions, log=log)
    table = format_results(results, work, repetitions)
    print(table, flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"bench-pixels-{stamp}.md").write_text(table + "\n")
    (out / f"bench-pixels-{stamp}.json").write_text(json.dumps({"work": vars(work), "results": results}, indent=1))
    return 0
