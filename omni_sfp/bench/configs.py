"""What the benchmark runs: the work every row does (equal by construction), the presets, and the rows.

Every framework is configured from one :class:`Work`, so a row cannot drift from the others: same network,
env count, horizon, mini-epochs, minibatch size, fixed learning rate, input and value normalisation, number
of PPO updates and env steps. What cannot be aligned is listed in :data:`UNALIGNED`, next to the numbers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

BIG_NETWORK = (2048, 1024, 1024, 512)  # the reference table's network


@dataclass(frozen=True)
class Work:
    """One run's amount of work, shared by every row (field comments give the framework keys)."""

    units: tuple[int, ...]  # trunk hidden layers (rl_games network.mlp.units, skrl layers, omni-sfp models.units)
    num_envs: int  # environments stepped together (rl_games num_actors)
    horizon: int  # env steps per env between updates (rl_games horizon_length, skrl rollouts)
    updates: int  # timed PPO updates per run (rl_games epochs)
    warmup_updates: int  # updates before the timer starts, in the same process (first calls, allocator)
    epochs: int  # passes over the rollout per update (rl_games mini_epochs, skrl learning_epochs)
    minibatch_size: int  # samples per minibatch (skrl mini_batches = num_envs * horizon / minibatch_size)
    episode_length: int  # time limit of the env; starts are staggered so some env truncates on most steps
    activation: str = "elu"
    learning_rate: float = 3e-4  # fixed: no KL-adaptive schedule, no KL early stop
    discount_factor: float = 0.99  # rl_games gamma
    gae_lambda: float = 0.95  # rl_games tau
    ratio_clip: float = 0.2  # rl_games e_clip
    value_clip: float = 0.2  # rl_games clip_value (clips by e_clip)
    grad_norm_clip: float = 1.0  # rl_games truncate_grads + grad_norm
    rewards_scale: float = 0.1  # rl_games reward_shaper.scale_value, omni-sfp train.ppo.rewards_scale
    task: str = "ConstantCost"  # the embedded task every row trains on (ConstantCost: fixed work per step)
    observation_size: int = 60  # ConstantCost's observation and action sizes (60 and 8: Ant's)
    action_size: int = 8

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.horizon

    @property
    def mini_batches(self) -> int:
        return self.batch_size // self.minibatch_size

    @property
    def total_updates(self) -> int:
        return self.warmup_updates + self.updates

    @property
    def timed_env_steps(self) -> int:
        """Env steps (all envs) inside the timed window of one run."""
        return self.updates * self.batch_size

    def check(self) -> None:
        """:raises ValueError: a size is not positive, or the rollout does not split into whole minibatches."""
        if not self.units or any(u < 1 for u in self.units):
            raise ValueError(f"units {list(self.units)}: must be a non-empty list of positive layer sizes")
        for name in ("num_envs", "horizon", "updates", "warmup_updates", "epochs", "minibatch_size", "episode_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.batch_size % self.minibatch_size:
            raise ValueError(
                f"minibatch size {self.minibatch_size} does not divide num_envs * horizon = "
                f"{self.num_envs} * {self.horizon} = {self.batch_size}"
            )

    def replace(self, **changes) -> Work:
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


PRESETS: dict[str, tuple[Work, int]] = {
    # The reference table (../shared/reference/single-forward-pass.txt): big network, 3840 steps per env, on
    # OmniIsaacGymEnvs' Ant, whose rl_games config gives the rest (4096 envs, horizon 16, minibatch 32768,
    # 4 mini-epochs, 1000-step episodes). Meant for a GPU.
    "reference": (
        Work(
            units=BIG_NETWORK,
            num_envs=4096,
            horizon=16,
            updates=240,
            warmup_updates=1,
            epochs=4,
            minibatch_size=32768,
            episode_length=1000,
        ),
        3,
    ),
    # The same network family and per-update shape (2 minibatches x 4 mini-epochs) sized for 2 CPU cores:
    # under 10 minutes for the default rows. 256 envs with 256-step episodes: one env truncates every step,
    # as 4096 envs with 1000-step episodes do on a GPU.
    "cpu": (
        Work(
            units=BIG_NETWORK,
            num_envs=256,
            horizon=16,
            updates=2,
            warmup_updates=1,
            epochs=4,
            minibatch_size=2048,
            episode_length=256,
        ),
        3,
    ),
    # The default training run (python -m omni_sfp.train: Cartpole, [256, 128, 64], 512 envs, horizon 64, 4 x 4
    # minibatches) on the same embedded Cartpole for every row: bound by per-step host work, not arithmetic. The
    # table adds rollout SPS and learning seconds per update; its default rows are the omni-sfp / rl_games pair.
    "cartpole": (
        Work(
            units=(256, 128, 64),
            num_envs=512,
            horizon=64,
            updates=4,
            warmup_updates=1,
            epochs=4,
            minibatch_size=8192,
            episode_length=500,
            task="Cartpole",
        ),
        3,
    ),
    # Isaac Lab's Humanoid as its skrl config trains it (Isaac-Humanoid-Direct: [400, 200, 100], 87 observations,
    # 21 actions, 4096 envs, 32 rollouts, 5 epochs x 4 minibatches), on the embedded ConstantCost: a small network
    # over many minibatches, where the host's work per minibatch is what a GPU waits on. For a GPU; on a CPU the
    # same network and per-update shape with 256 envs (CPU_SIZED).
    "isaaclab": (
        Work(
            units=(400, 200, 100),
            num_envs=4096,
            horizon=32,
            updates=20,
            warmup_updates=1,
            epochs=5,
            minibatch_size=32768,
            episode_length=1000,
            observation_size=87,
            action_size=21,
        ),
        3,
    ),
    # Tiny: every row end to end in seconds (tests, smoke runs); the numbers mean nothing.
    "quick": (
        Work(
            units=(32, 32),
            num_envs=16,
            horizon=8,
            updates=2,
            warmup_updates=1,
            epochs=2,
            minibatch_size=64,
            episode_length=16,
        ),
        3,
    ),
}


# Presets sized for a GPU, scaled down where the run is on a CPU (the same network and per-update shape)
CPU_SIZED: dict[str, Work] = {
    "isaaclab": PRESETS["isaaclab"][0].replace(num_envs=256, minibatch_size=2048, updates=3),
}


def preset_work(name: str, device_type: str) -> tuple[Work, int]:
    """The work and default repetitions of preset ``name`` on a ``device_type`` run."""
    work, repetitions = PRESETS[name]
    if device_type != "cuda" and name in CPU_SIZED:
        work = CPU_SIZED[name]
    return work, repetitions


@dataclass(frozen=True)
class Row:
    """One configuration of the table."""

    id: str
    framework: str  # "rlgames" | "omni" | "skrl" | "bare" | "floor" | "ceiling"
    mixed_precision: bool
    single_forward_pass: bool
    time_limit_bootstrap: bool
    compile: bool = False  # omni-sfp: train.models.compile (the trunk through torch.compile)
    capture: bool = False  # omni-sfp: train.capture (the minibatch step compiled, in a CUDA graph on CUDA)

    @property
    def precision(self) -> str:
        return "mixed" if self.mixed_precision else "fp32"

    @property
    def label(self) -> str:
        names = {
            "rlgames": "rl_games",
            "omni": "omni-sfp",
            "skrl": "skrl built-in",
            "bare": "bare-torch PPO",
            "floor": "compute floor",
            "ceiling": "GEMM ceiling",
        }
        parts = [names[self.framework]]
        if self.framework == "omni":
            parts.append("SFP (auto)" if self.single_forward_pass else "double pass (off)")
        elif self.framework == "skrl":
            parts.append("SFP")
        parts.append(self.precision)
        if self.time_limit_bootstrap and self.framework in ("omni", "skrl"):
            parts.append("+ bootstrap")
        if self.compile:
            parts.append("torch.compile")
        if self.capture:
            parts.append("captured")
        return ", ".join(parts)


def precision_effect(row: Row, device_type: str) -> str:
    """What a row's precision setting really computes on this device."""
    if not row.mixed_precision:
        return "fp32"
    if row.framework == "rlgames":
        if device_type == "cuda":
            return "bf16 autocast + GradScaler"
        return "fp32 (rl_games' mixed precision is CUDA-only)"
    if row.framework in ("bare", "floor"):
        return "bf16 autocast" if device_type == "cpu" else "fp16 autocast"
    if row.framework == "ceiling":
        return "bf16 GEMMs" if device_type == "cpu" else "fp16 GEMMs"
    return "bf16 autocast" if device_type == "cpu" else "fp16 autocast + GradScaler"


def _rows() -> dict[str, Row]:
    rows = [Row(f"rlgames-{p}", "rlgames", p == "mixed", True, True) for p in ("fp32", "mixed")]
    kinds = (("omni", False, "omni-double"), ("omni", True, "omni-sfp"), ("skrl", True, "skrl-sfp"))
    for framework, sfp, name in kinds:
        for tlb in (False, True):
            for p in ("fp32", "mixed"):
                rows.append(Row(f"{name}-{p}{'-tlb' if tlb else ''}", framework, p == "mixed", sfp, tlb))
    rows += [Row(f"omni-sfp-{p}-compiled", "omni", p == "mixed", True, False, compile=True) for p in ("fp32", "mixed")]
    for name, sfp in (("omni-double", False), ("omni-sfp", True)):
        rows += [Row(f"{name}-{p}-captured", "omni", p == "mixed", sfp, False, capture=True) for p in ("fp32", "mixed")]
    rows += [Row(f"bare-ppo-{p}", "bare", p == "mixed", True, False) for p in ("fp32", "mixed")]
    rows += [Row(f"floor-{p}", "floor", p == "mixed", True, False) for p in ("fp32", "mixed")]
    rows += [Row(f"ceiling-{p}", "ceiling", p == "mixed", True, False) for p in ("fp32", "mixed")]
    return {row.id: row for row in rows}


ROWS: dict[str, Row] = _rows()
# The default table: everything but the double pass with bootstrap (its cost is the double pass plus one more
# forward per step, which says nothing new) and the compiled and captured rows (their first update compiles: tens
# of seconds on a CPU); ``--rows all`` adds them.
DEFAULT_ROWS: tuple[str, ...] = tuple(
    r
    for r in ROWS
    if not (r.startswith("omni-double") and r.endswith("-tlb")) and not r.endswith(("-compiled", "-captured"))
)


# The cartpole preset's default: the small-network pair of issue 14, with bare PPO, the floor and the ceiling for
# scale.
CARTPOLE_ROWS: tuple[str, ...] = ("rlgames-fp32", "omni-sfp-fp32", "bare-ppo-fp32", "floor-fp32", "ceiling-fp32")


def select_rows(spec: str, preset: str = "cpu") -> list[Row]:
    """``default`` (the preset's default rows), ``all`` or a comma-separated list of row ids, in table order.

    :raises ValueError: an unknown id.
    """
    if spec == "default":
        return [ROWS[r] for r in (CARTPOLE_ROWS if preset == "cartpole" else DEFAULT_ROWS)]
    if spec == "all":
        return list(ROWS.values())
    wanted = [part.strip() for part in spec.split(",") if part.strip()]
    unknown = [r for r in wanted if r not in ROWS]
    if unknown or not wanted:
        raise ValueError(
            f"unknown row {', '.join(unknown) or repr(spec)}; rows: default, all, or any of {', '.join(ROWS)}"
        )
    return [row for row in ROWS.values() if row.id in wanted]


def kernels_info(choices: dict[str, Any], sources: dict[str, str] | None = None) -> dict[str, Any]:
    """A row's CPU speed choices (omni_sfp.compute.cpu_choices' names) and, for the rows that choose, where each came
    from ("measured", "cached", "forced", "default: ..."): the report names them for every row."""
    return {"choices": dict(choices), "sources": dict(sources or {})}


# Differences in work that the configuration cannot align, per framework (shown under the table and in docs).
UNALIGNED: dict[str, list[str]] = {
    "rlgames": [
        "mixed_precision is CUDA-only in rl_games 1.6.5 (autocast('cuda') + GradScaler('cuda')): on CPU the "
        "'mixed' row does fp32 work",
        "always fused Adam (torch.optim.Adam(fused=True)); skrl's PPO uses torch's default Adam (a loop over "
        "parameters on CPU, foreach on CUDA: 15 ms against 2.5 ms per step for the big network on a 2-core EPYC, "
        "1 thread); omni-sfp follows train.ppo.fused_optimizer where it has it (the notes say 'fused Adam')",
        "contiguous, never shuffled minibatches; skrl reshuffles every epoch (a gather per minibatch)",
        "calls its learning-rate scheduler and reads the KL back (.item()) after every minibatch; with the "
        "fixed rate used here the scheduler is the identity, so no KL-adaptive rate applies",
        "bootstraps time-outs from the values it already has for the current step, never an extra forward",
        "one host sync per env step (dones.nonzero() for episode statistics)",
        "clamps and rescales actions to the action space itself (clip_actions); skrl leaves that to the env",
        "computes an action-bound loss (bounds_loss_coef 0 here) and the PPO value loss as max(clipped, "
        "unclipped); skrl takes the clipped one",
        "writes TensorBoard scalars every update; the skrl rows write none (write_interval 0)",
        "default PyTorch layer init (orthogonal in omni-sfp; no effect on speed)",
        "mixed precision on CUDA is bf16 autocast (a2c_continuous.py) with a GradScaler; omni-sfp's is fp16 "
        "autocast with a GradScaler, as skrl's",
        "aligned, not left: its Runner turns TF32 on for the process (torch_runner.py); the bench turns it back "
        "off after building it, so fp32 is fp32 in every row (bench/rlgames.py restore_float32_precision)",
    ],
    "skrl": [
        "driven by skrl's own SequentialTrainer (per-step timing bookkeeping); the omni-sfp rows by the "
        "product's loop (omni_sfp/ppo/loop.py Learner)",
        "its time-limit bootstrap runs a value-only trunk forward on every step where some env truncated "
        "(one host sync per step for truncated.any())",
    ],
    "omni": [
        "with bootstrap on, omni-sfp evaluates V(next obs) on every step, served to the next step's policy and "
        "value calls by the keyed cache (a miss there is a full forward: the double-pass row pays it)",
        "on CPU its ELU kernels (torch's, or max(x, exp(min(x, 0)) - 1) within 2**-23 of it), its allocator (glibc's "
        "defaults, or keeping freed memory: omni_sfp/compute/device.py keep_freed_memory) and fused Adam are chosen by "
        "measurement once per CPU kind (omni_sfp/compute/cpu_choices.py; the kernels column says what each row ran with); "
        "rl_games and skrl use torch's nn.ELU and glibc's defaults",
    ],
    "bare": [
        "PPO in straight-line torch (bench/bare_ppo.py): the floor's network and CPU choices, plus everything the "
        "floor leaves out, each the cheapest way: the env, Gaussian sampling and log-probabilities, the rollout in "
        "preallocated tensors, skrl's observation and value scalers trained once an update on the whole rollout "
        "(the frameworks: every minibatch of the first epoch), GAE, one permutation and one gather an epoch, "
        "PPO's clipped policy and value losses; no framework, bookkeeping, statistics or host reads. Its ratio "
        "to the floor is what PPO itself costs here; a framework's ratio to it is the framework's overhead",
    ],
    "floor": [
        "only the network's work and its learning rule: the rollout's inference forwards (horizon + 1 per update), "
        "then epochs x minibatches of forward, backward, the gradient-norm clip and an Adam step on contiguous "
        "slices (omni-sfp's clipped step, omni_sfp/compute/optim.py); no env, sampling, log-probabilities of the "
        "rollout, normalisation, GAE, shuffling, PPO's clipped losses or GradScaler; omni-sfp's trunk and its CPU "
        "choices (ELU kernels, allocator, fused Adam); its rollout SPS is the inference forwards' alone",
    ],
    "ceiling": [
        "the floor's matrix products alone, as bare torch.mm on contiguous operands, each shape at the fastest of "
        "a few repetitions (bench/ceiling.py): the update's time if nothing else ran; TFLOP/s count the floor's "
        "useful GEMM FLOPs for every row (a double pass is credited the same work, so it shows fewer TFLOP/s)",
    ],
}
