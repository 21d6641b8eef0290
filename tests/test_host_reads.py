"""What one training iteration asks of the host, counted exactly: aten calls (each non-view one is a kernel
launch on CUDA) and host reads, by a dispatch mode on the code path CUDA takes, forced on the CPU.

A host read is a call that needs a tensor's value on the host: ``.item()`` / ``bool()`` / ``float()``
(``aten._local_scalar_dense``), the data-dependent shapes (``nonzero``, ``masked_select``, ``unique``), ``equal``,
and a copy to the CPU (``omni_sfp.compute.device.read_back``, the loop's one way of reading results). On CUDA each
of these waits for the device. A count is the same on any machine: the budget below is asserted, the op counts are
printed (``pytest -s``) for docs/benchmarks.md.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from omni_sfp.envs.embedded import EmbeddedEnvWrapper
from omni_sfp.ppo.loop import Learner
from omni_sfp.run.compose import load_config
from omni_sfp.run.runner import build_agent, build_models
from omni_sfp.tasks.cartpole import Cartpole

READS = {
    "aten._local_scalar_dense.default",
    "aten.nonzero.default",
    "aten.masked_select.default",
    "aten.equal.default",
    "aten.is_nonzero.default",
}
COPIES, CPU = ("aten._to_copy.default", "aten.copy_.default"), torch.device("cpu")
ENVS, ROLLOUTS, MINI_BATCHES, EPOCHS = 64, 8, 4, 2


class Counter(TorchDispatchMode):
    """Counts aten calls, non-view ones and host reads, into the phase set by :meth:`phase`."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, list[int]] = {}
        self.current = "other"

    def phase(self, name: str) -> None:
        self.current = name
        self.counts.setdefault(name, [0, 0, 0])

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        counts = self.counts.setdefault(self.current, [0, 0, 0])
        counts[0] += 1
        if not func.is_view:
            counts[1] += 1
        name = str(func)
        to_host = name in COPIES and kwargs.get("device") == CPU
        if name in READS or name.startswith("aten.unique") or to_host:
            counts[2] += 1
        return func(*args, **kwargs)


def build():
    cfg = load_config(
        [
            "task=Cartpole",
            f"num_envs={ENVS}",
            f"train.ppo.rollouts={ROLLOUTS}",
            f"train.ppo.mini_batches={MINI_BATCHES}",
            f"train.ppo.learning_epochs={EPOCHS}",
            "train.ppo.fused_optimizer=true",
            "train.capture=false",
            "train.models.compile=false",
        ]
    )
    # CUDA's path: the task checks no action on the host (it does so on the CPU only), the agent reads nothing
    env = EmbeddedEnvWrapper(Cartpole(ENVS, "cpu", 0, max_episode_length=20, validate_actions=False))
    agent = build_agent(cfg, env, build_models(cfg, env, torch.device("cpu")), torch.device("cpu"), run_dir=None)
    agent.sync_free = True
    return agent, Learner(env, agent, iterations=3)


def count_iteration(agent, learner) -> Counter:
    """Counts the third iteration of ``learner`` by phase: each rollout step, each minibatch step, the rest."""
    learner.iterations = 2
    learner.learn()  # the first steps (eager, optimizer state) and any compile happen here
    counter = Counter()
    act, step = agent.act, agent._run_step

    def counted_act(*args, **kwargs):
        counter.phase("rollout")
        return act(*args, **kwargs)

    def counted_step(batch):
        counter.phase("minibatch")
        step(batch)
        counter.phase("update")

    agent.act, agent._run_step = counted_act, counted_step
    original_update = agent.update

    def counted_update(**kwargs):
        counter.phase("update")
        return original_update(**kwargs)

    agent.update = counted_update
    learner.iterations = 3
    with counter:
        learner.learn()
    return counter


def test_an_iteration_reads_the_host_once_and_never_in_a_rollout_step_or_a_minibatch():
    """Eager: every op is dispatched where the counter sees it. (A compiled step cannot run under a dispatch mode;
    tests/test_step.py shows it is one graph, and a graph holds no host read: one would break it.)"""
    agent, learner = build()
    counter = count_iteration(agent, learner)
    rollout, minibatch, update = (counter.counts.get(k, [0, 0, 0]) for k in ("rollout", "minibatch", "update"))
    steps = EPOCHS * MINI_BATCHES
    print(
        f"\nper rollout step: {rollout[0] / ROLLOUTS:.0f} aten ops ({rollout[1] / ROLLOUTS:.0f} non-view); "
        f"per minibatch: {minibatch[0] / steps:.0f} ({minibatch[1] / steps:.0f}); rest of the update: {update[0]}"
    )
    assert rollout[2] == 0, f"{rollout[2]} host reads in {ROLLOUTS} rollout steps"
    assert minibatch[2] == 0, f"{minibatch[2]} host reads in {steps} minibatches"
    assert update[2] == 1, f"{update[2]} host reads in the rest of the update"
    assert counter.counts.get("other", [0, 0, 0])[2] == 0
    assert agent.last_losses["minibatches"] == steps and agent.sfp_share_rate == 1.0


def test_the_host_path_reads_the_rollouts_data_before_its_update():
    """On the CPU (not sync-free) the non-finite check reads before the update, so an update never runs on bad
    data: one read more, which costs nothing there."""
    agent, learner = build()
    agent.sync_free = False
    counter = count_iteration(agent, learner)
    assert counter.counts["update"][2] == 2
