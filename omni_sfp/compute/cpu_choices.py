"""Speed choices that depend on the CPU, measured on the CPU that runs them and remembered per CPU kind.

Which side is faster turns on the CPU: torch's ELU or :func:`omni_sfp.compute.kernels.fast_elu` (the hand-written one
won by 40% on AMD Zen 3, whose ``expm1`` is not vectorised, and loses on Zen 4 and Zen 5), glibc's malloc
defaults or keeping freed memory (:func:`omni_sfp.compute.device.keep_freed_memory`), fused Adam or torch's loop over
the parameters, torch's thread count or half of it. So at the first training start on a CPU kind it has not
seen, :func:`resolve` times the candidates of each setting left at ``auto`` (``train.kernels.*``,
``train.ppo.fused_optimizer``), a few hundred milliseconds in all, and keeps the choices in
``$XDG_CACHE_HOME/omni-sfp/cpu-choices.json`` (default ``~/.cache``), keyed by :func:`cpu_key`: CPU model,
family/model/stepping, a hash of its flags, torch's version, the dtype and the cores. Later starts read them.

Noise: the candidates are timed in interleaved rounds (A B, then B A), each candidate's time is the median of
its rounds, and the default side (torch's ELU, keeping freed memory, fused Adam, torch's thread count) keeps
its place unless the other is faster by :data:`MARGIN`. The thread count is measured only on a quiet machine
(a busy neighbour makes fewer threads look faster, and a count measured at every start would make two runs
of one seed differ); on a busy one it stays torch's until a quiet start measures it. The sizes are the default run's (Cartpole: 512 envs, trunk [256, 128, 64], minibatch 8192;
the thread and allocator steps take a part of it): the probe is deterministic work, only its clock is not.
The kernels are compared at one thread: the choice is about the kernel on this CPU, and with two threads a
neighbour's load turns a comparison into one of OpenMP's barrier waits (on a busy moment a two-thread fused
Adam step took 27 ms against 0.1 ms quiet, and lost to the loop).

Not measured here: ``train.models.compile``. Compiling costs 10-25 s, far beyond a probe; its ``auto``
(:class:`omni_sfp.compute.compile_policy.AutoCompile`) times the run's own eager iterations on the machine, then
checks the saving on the machine once compiled (see that module).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from omni_sfp.compute import distributed
from omni_sfp.compute.device import keep_freed_memory, malloc_tuned
from omni_sfp.compute.kernels import FastELUInPlace, fast_elu_, use_elu_kernels
from omni_sfp.compute.optim import clip_and_step
from omni_sfp.config import schema

BUDGET_S = 0.15  # a measurement's rounds stop after this many seconds (at least two rounds run)
MARGIN = 0.05  # the other side must take at most (1 - MARGIN) of the default side's median time to be chosen
QUIET_LOAD = 0.25  # load average per core (1 minute) below which the thread count is measured
CACHE_FILE = "cpu-choices.json"
CACHE_VERSION = 2  # 2: the ELU kernels are timed in place, as the trunks run them (1 timed them out of place)
# the probe's sizes: the default run's (Cartpole) rollout batch, minibatch and trunk; 64 observations
ROLLOUT_ROWS, MINIBATCH_ROWS, OBSERVATIONS, UNITS = 512, 8192, 64, (256, 128, 64)
SIMD_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_bf16", "amx_tile", "neon", "sve")
NAMES = ("elu_no_grad", "elu_autograd", "allocator", "fused_adam", "threads")
SETTING_KEYS = {  # choice -> its setting (omni_sfp/config/schema.py)
    "elu_no_grad": "train.kernels.elu_no_grad",
    "elu_autograd": "train.kernels.elu_autograd",
    "allocator": "train.kernels.allocator",
    "fused_adam": "train.ppo.fused_optimizer",
    "threads": "train.kernels.threads",
}


@dataclass(frozen=True)
class Settings:
    """What the config asks: ``"auto"`` (``0`` for the threads) leaves a choice to the measurement."""

    elu_no_grad: str = schema.AUTO
    elu_autograd: str = schema.AUTO
    allocator: str = schema.AUTO
    fused_adam: bool | str = schema.AUTO
    threads: int = 0

    @classmethod
    def from_config(cls, cfg: Any) -> Settings:
        kernels = cfg.train.kernels
        return cls(
            elu_no_grad=kernels.elu_no_grad,
            elu_autograd=kernels.elu_autograd,
            allocator=kernels.allocator,
            fused_adam=cfg.train.ppo.fused_optimizer,
            threads=int(kernels.threads),
        )

    def forced(self) -> dict[str, Any]:
        """The choices the config makes itself."""
        return {
            name: getattr(self, name)
            for name in NAMES
            if getattr(self, name) != (0 if name == "threads" else schema.AUTO)
        }


@dataclass(frozen=True)
class CPUChoices:
    """The choices a run applies, where each came from, and what the probe measured (median seconds)."""

    elu_no_grad: str
    elu_autograd: str
    allocator: str  # "keep_freed" or "glibc"
    fused_adam: bool
    threads: int
    sources: dict[str, str]  # choice -> "measured", "cached", "forced", or "default (<why>)"
    timings: dict[str, dict[str, float]] = field(default_factory=dict)  # choice -> candidate -> seconds
    key: str = ""
    probe_s: float | None = None  # seconds this start spent measuring (None: nothing measured)
    note: str = ""  # anything the line must add (e.g. an allocator choice that takes effect at the next start)

    def as_dict(self) -> dict[str, Any]:
        """The choices alone, as the config spells them (the benchmark's notes, the run's config.yaml)."""
        return {name: getattr(self, name) for name in NAMES}

    def line(self) -> str:
        """One line for the start of a run: each choice, where it came from, and the probe's figures."""
        parts = []
        for name in NAMES:
            value = getattr(self, name)
            text = f"{name}={str(value).lower() if isinstance(value, bool) else value} ({self.sources[name]}"
            if name in self.timings:
                text += ": " + " / ".join(f"{c} {_duration(s)}" for c, s in self.timings[name].items())
            parts.append(text + ")")
        when = "" if self.probe_s is None else f"; probe {self.probe_s:.2f} s"
        note = f"; {self.note}" if self.note else ""
        return f"[omni_sfp] CPU choices for {self.key}: {', '.join(parts)}{when}{note}"


def _duration(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f} us"


# -- the CPU kind and the cache ----------------------------------------------------------------------------------
def cpu_identity() -> dict[str, Any]:
    """The CPU as /proc/cpuinfo names it (model name, family, model, stepping, flags); elsewhere platform's."""
    info: dict[str, Any] = {"model": platform.processor() or platform.machine() or "unknown CPU", "flags": []}
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        fields_ = {}
        for line in cpuinfo.read_text().splitlines():
            if not line.strip():
                if fields_:
                    break  # the first processor describes them all
                continue
            name, _, value = line.partition(":")
            fields_.setdefault(name.strip(), value.strip())
        info["model"] = fields_.get("model name") or fields_.get("Model") or info["model"]
        for name, label in (("cpu family", "family"), ("model", "model_number"), ("stepping", "stepping")):
            if name in fields_:
                info[label] = fields_[name]
        info["flags"] = sorted((fields_.get("flags") or fields_.get("Features") or "").split())
    return info


def simd_flags(identity: dict[str, Any]) -> list[str]:
    """The flags that decide these kernels, of those the CPU has (the line and the benchmark name them)."""
    return [flag for flag in SIMD_FLAGS if flag in identity["flags"]]


def cpu_key(dtype: str, identity: dict[str, Any] | None = None) -> str:
    """The cache key: CPU model (family/model/stepping), a hash of all its flags, torch, the dtype, the cores."""
    identity = cpu_identity() if identity is None else identity
    kind = "/".join(str(identity[k]) for k in ("family", "model_number", "stepping") if k in identity)
    flags = hashlib.sha1(" ".join(identity["flags"]).encode()).hexdigest()[:10]
    return (
        f"{identity['model']}{f' ({kind})' if kind else ''} [{' '.join(simd_flags(identity)) or 'no SIMD flags'}; "
        f"flags {flags}], torch {torch.__version__}, {dtype}, {len(os.sched_getaffinity(0))} cores"
    )


def cache_path() -> Path:
    """``$XDG_CACHE_HOME/omni-sfp/cpu-choices.json``, ``~/.cache/omni-sfp/...`` without it."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "omni-sfp" / CACHE_FILE


def read_cache(path: Path) -> dict[str, Any]:
    """The cache's entries; a missing, unreadable or older-format file counts as empty (it is only a cache)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION or not isinstance(data.get("entries"), dict):
        return {}
    return data["entries"]


def write_cache_entry(path: Path, key: str, entry: dict[str, Any]) -> bool:
    """Merge ``entry`` under ``key`` and replace the file atomically (a temporary file, then ``os.replace``),
    so a reader never sees half a file. Returns False when the folder is not writable (the run goes on)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        entries = read_cache(path)
        merged = dict(entries.get(key, {}))
        for name, value in entry.items():  # per-choice tables merge: a later probe may measure only some
            merged[name] = (
                {**merged[name], **value} if isinstance(value, dict) and isinstance(merged.get(name), dict) else value
            )
        entries[key] = merged
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(handle, "w") as out:
                json.dump({"version": CACHE_VERSION, "entries": entries}, out, indent=1, sort_keys=True)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError:
        return False
    return True


# -- the probe ---------------------------------------------------------------------------------------------------
def interleaved(
    candidates: dict[str, Callable[[], Any]], *, rounds: int, calls: int, budget_s: float = BUDGET_S
) -> dict[str, float]:
    """Median seconds per call of each candidate over ``rounds`` rounds of ``calls`` calls, the candidates'
    order reversed every other round; two untimed calls of each first (first calls fault their memory in).
    Rounds after the first two stop once ``budget_s`` is spent (a loaded machine must not stall the start):
    short samples, many rounds, so that a neighbour's time slice spoils a minority of them."""
    for run in [*candidates.values()] * 2:
        run()
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    names = list(candidates)
    begin = time.perf_counter()
    for round_ in range(rounds):
        if round_ >= 2 and time.perf_counter() - begin > budget_s:
            break
        for name in names if round_ % 2 == 0 else names[::-1]:
            run = candidates[name]
            start = time.perf_counter()
            for _ in range(calls):
                run()
            samples[name].append((time.perf_counter() - start) / calls)
    return {name: statistics.median(values) for name, values in samples.items()}


def pick(timings: dict[str, float], default: str, other: str) -> str:
    """``other`` only when its median beats ``default``'s by :data:`MARGIN`, else ``default``."""
    return other if timings[other] < (1 - MARGIN) * timings[default] else default


class _Probe:
    """The probe's fixed, seeded inputs: a trunk of the default run's shape, a rollout batch, a minibatch."""

    def __init__(self, autocast: bool) -> None:
        generator = torch.Generator().manual_seed(0)  # the global RNG stays untouched

        def randn(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, generator=generator)

        layers, width = [], OBSERVATIONS
        for size in UNITS:
            layers += [torch.nn.Linear(width, size), torch.nn.ELU()]
            width = size
        self.trunk = torch.nn.Sequential(*layers, torch.nn.Linear(width, 9))  # 8 action means + a value
        self.autocast = autocast
        self.rollout = randn(ROLLOUT_ROWS, UNITS[0])
        self.activations = randn(MINIBATCH_ROWS, UNITS[0]).requires_grad_()
        self.upstream = randn(MINIBATCH_ROWS, UNITS[0])
        self.minibatch = randn(MINIBATCH_ROWS, OBSERVATIONS)

    def backward(self, rows: int = MINIBATCH_ROWS) -> None:
        """A training step's forward and backward through the trunk on ``rows`` rows of the minibatch."""
        self.trunk.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.autocast):
            loss = self.trunk(self.minibatch[:rows]).float().square().mean()
        loss.backward()


def measure_threads(probe: _Probe, default: int) -> tuple[int, dict[str, float]]:
    """torch's thread count against half of it, on a minibatch's forward and backward (an eighth of the
    default run's: threads are about synchronisation, and a busy neighbour must not stall the start)."""
    candidates = {}
    for threads in (default, default // 2):

        def run(threads: int = threads) -> None:
            torch.set_num_threads(threads)
            probe.backward(rows=MINIBATCH_ROWS // 8)

        candidates[str(threads)] = run
    try:
        timings = interleaved(candidates, rounds=9, calls=1)
    finally:
        torch.set_num_threads(default)
    return int(pick(timings, str(default), str(default // 2))), timings


def measure_elu_no_grad(probe: _Probe) -> tuple[str, dict[str, float]]:
    """Both ELU kernels on a rollout batch of the trunk's widest layer, without autograd, in place as the
    trunks run them (each call writes over a fresh copy of the batch: both sides pay the copy)."""
    x, scratch = probe.rollout, torch.empty_like(probe.rollout)
    with torch.no_grad():
        timings = interleaved(
            {"torch": lambda: F.elu(scratch.copy_(x), inplace=True), "fast": lambda: fast_elu_(scratch.copy_(x))},
            rounds=11,
            calls=10,
        )
    return pick(timings, "torch", "fast"), timings


def measure_elu_autograd(probe: _Probe) -> tuple[str, dict[str, float]]:
    """Both ELU kernels, forward and backward, on a minibatch of the trunk's widest layer (8192 x 256), in place
    as the trunks run them (on a clone of the activations, which stands for the layer's output: both sides pay
    the clone)."""
    x, upstream = probe.activations, probe.upstream
    timings = interleaved(
        {
            "torch": lambda: torch.autograd.grad(F.elu(x.clone(), inplace=True), x, upstream),
            "fast": lambda: torch.autograd.grad(FastELUInPlace.apply(x.clone()), x, upstream),
        },
        rounds=9,
        calls=1,
    )
    return pick(timings, "torch", "fast"), timings


def measure_adam(probe: _Probe) -> tuple[bool, dict[str, float]]:
    """One Adam step with the gradient-norm clip, as the update takes it (:func:`omni_sfp.compute.optim.clip_and_step`):
    fused with the clip as its ``grad_scale``, against torch's default Adam after ``clip_grad_norm_``."""
    probe.backward(rows=MINIBATCH_ROWS // 8)  # gradients of the trunk's shape; their values do not matter
    sides = {}
    for fused in (True, False):
        params = [p.detach().clone().requires_grad_() for p in probe.trunk.parameters()]
        for param, source in zip(params, probe.trunk.parameters()):
            param.grad = source.grad.clone()
        sides[fused] = (params, torch.optim.Adam(params, lr=1e-4, fused=fused))

    timings = interleaved(
        {
            "fused": lambda: clip_and_step(sides[True][1], sides[True][0], 1.0),
            "loop": lambda: clip_and_step(sides[False][1], sides[False][0], 1.0),
        },
        rounds=11,
        calls=3,
    )
    return pick(timings, "fused", "loop") == "fused", timings


def measure_allocator(probe: _Probe) -> tuple[str, dict[str, float], dict[str, float]]:
    """Training steps under glibc's own malloc behaviour, then with :func:`keep_freed_memory`: their median
    times and minor page faults per step. Not interleaved: glibc's adaptive thresholds cannot be restored once
    set, so the glibc side runs first, and this process keeps freed memory from then on."""
    steps, rows = 4, MINIBATCH_ROWS // 2

    def phase() -> tuple[float, float]:
        probe.backward(rows)  # untimed: the first step after a change settles the heap
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            probe.backward(rows)
            times.append(time.perf_counter() - start)
        return statistics.median(times), (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / steps

    glibc_s, glibc_faults = phase()
    if not keep_freed_memory(torch.device("cpu")):
        return "glibc", {"glibc": glibc_s}, {"glibc": glibc_faults}
    keep_s, keep_faults = phase()
    timings = {"keep_freed": keep_s, "glibc": glibc_s}
    return pick(timings, "keep_freed", "glibc"), timings, {"keep_freed": keep_faults, "glibc": glibc_faults}


# -- deciding and applying ---------------------------------------------------------------------------------------
DEFAULTS: dict[str, Any] = {
    "elu_no_grad": "torch",
    "elu_autograd": "torch",
    "allocator": "keep_freed",
    "fused_adam": True,
}
_current: CPUChoices | None = None  # what apply() set in this process
_torch_threads: int | None = None  # torch's thread count before apply() first changed it


def current() -> CPUChoices | None:
    """The choices :func:`apply` set in this process (None before)."""
    return _current


def resolve(
    settings: Settings,
    device: torch.device,
    *,
    mixed_precision: bool,
    cache: Path | None = None,
    measure: bool = True,
) -> CPUChoices:
    """The choices for a run on ``device``: forced ones as given, ``auto`` ones from the cache for this CPU
    kind, else measured now (and cached). Off the CPU, in a multi-process run (the ranks would measure each
    other) and with ``measure=False``, an uncached ``auto`` is the default side."""
    cache = cache_path() if cache is None else cache
    dtype = "bfloat16 autocast" if mixed_precision else "float32"
    identity = cpu_identity()
    key = cpu_key(dtype, identity)
    default_threads = _torch_threads or torch.get_num_threads()
    chosen: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name, value in settings.forced().items():
        chosen[name], sources[name] = value, "forced"
    auto = [name for name in NAMES if name not in chosen]

    def default(name: str, why: str) -> None:
        chosen[name] = default_threads if name == "threads" else DEFAULTS[name]
        sources[name] = f"default: {why}"

    if device.type != "cpu":
        for name in auto:
            default(name, f"not measured on {device.type}")
        return _choices(chosen, sources, key=key)
    if max(distributed.world_size(), int(os.environ.get("WORLD_SIZE", "1"))) > 1 or not measure:
        for name in auto:
            default(name, "not measured in a multi-process run" if measure else "not measured")
        return _choices(chosen, sources, key=key)
    if "threads" in auto and os.environ.get("OMP_NUM_THREADS"):
        chosen["threads"], sources["threads"] = default_threads, "OMP_NUM_THREADS"
        auto.remove("threads")
    if default_threads < 2 and "threads" in auto:
        default("threads", "one thread only")
        auto.remove("threads")
    load = os.getloadavg()[0] / len(os.sched_getaffinity(0))
    for name in ("elu_no_grad", "elu_autograd"):
        if name in auto and mixed_precision:
            default(name, "bf16 tensors take torch's ELU")
            auto.remove(name)
    entry = read_cache(cache).get(key, {})
    for name in list(auto):
        if name in entry.get("choices", {}):
            chosen[name], sources[name] = entry["choices"][name], "cached"
            auto.remove(name)
    if "allocator" in auto and malloc_tuned():
        default("allocator", "this process already keeps freed memory")
        auto.remove("allocator")
    if "threads" in auto and load >= QUIET_LOAD:
        default("threads", f"not measured, load {load:.2f} per core")
        auto.remove("threads")
    if not auto:
        return _choices(chosen, sources, key=key)
    return _measure(
        auto, chosen, sources, key=key, cache=cache, identity=identity, mixed_precision=mixed_precision, load=load
    )


def _measure(
    names: list[str],
    chosen: dict[str, Any],
    sources: dict[str, str],
    *,
    key: str,
    cache: Path,
    identity: dict[str, Any],
    mixed_precision: bool,
    load: float,
) -> CPUChoices:
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # torch's lazy imports (~0.7 s), which the run pays anyway
    start = time.perf_counter()
    probe = _Probe(autocast=mixed_precision)
    timings: dict[str, dict[str, float]] = {}
    faults: dict[str, float] = {}
    threads_before = torch.get_num_threads()
    if "threads" in names:  # torch's own count, even where an earlier run in this process changed it
        chosen["threads"], timings["threads"] = measure_threads(probe, _torch_threads or threads_before)
    torch.set_num_threads(1)  # the kernels at one thread: see the module's docstring
    try:
        if "allocator" in names:
            chosen["allocator"], timings["allocator"], faults = measure_allocator(probe)
        if "elu_no_grad" in names:
            chosen["elu_no_grad"], timings["elu_no_grad"] = measure_elu_no_grad(probe)
        if "elu_autograd" in names:
            chosen["elu_autograd"], timings["elu_autograd"] = measure_elu_autograd(probe)
        if "fused_adam" in names:
            chosen["fused_adam"], timings["fused_adam"] = measure_adam(probe)
    finally:
        torch.set_num_threads(threads_before)
    seconds = time.perf_counter() - start
    for name in names:
        sources[name] = "measured"
    entry = {
        "choices": {name: chosen[name] for name in names},
        "timings_s": {name: timings[name] for name in names},
        "page_faults_per_step": faults,
        "cpu": {"model": identity["model"], "simd_flags": simd_flags(identity)},
        "probe_s": seconds,
        "load_per_core": load,
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    }
    written = write_cache_entry(cache, key, entry)
    note = "" if written else f"not cached ({cache} is not writable)"
    if chosen.get("allocator") == "glibc" and malloc_tuned():
        note = "; ".join(filter(None, [note, "allocator=glibc from the next start (this process measured keep_freed)"]))
    return _choices(chosen, sources, key=key, timings=timings, probe_s=seconds, note=note)


def _choices(chosen: dict[str, Any], sources: dict[str, str], **extra: Any) -> CPUChoices:
    return CPUChoices(**{name: chosen[name] for name in NAMES}, sources=sources, **extra)


def apply(choices: CPUChoices, device: torch.device) -> None:
    """Set the process-wide choices: the ELU kernels, the thread count, the allocator (a CPU run's).
    ``fused_adam`` is the agent's (``train.ppo.fused_optimizer``, which :func:`apply_config` resolves)."""
    global _current, _torch_threads
    use_elu_kernels(no_grad=choices.elu_no_grad, autograd=choices.elu_autograd)
    if device.type == "cpu":
        if choices.threads != torch.get_num_threads():
            _torch_threads = _torch_threads or torch.get_num_threads()
            torch.set_num_threads(choices.threads)
        if choices.allocator == "keep_freed":
            keep_freed_memory(device)
    _current = choices


def apply_config(cfg: Any, device: torch.device, *, cache: Path | None = None) -> CPUChoices:
    """Resolve and apply the config's choices, and write them into ``cfg`` in place of ``auto`` (so the run
    folder's config.yaml says what the run used, as it does for a drawn seed)."""
    choices = resolve(Settings.from_config(cfg), device, mixed_precision=bool(cfg.train.mixed_precision), cache=cache)
    apply(choices, device)
    for name, value in choices.as_dict().items():
        parent, _, leaf = SETTING_KEYS[name].rpartition(".")
        node = cfg
        for part in parent.split("."):
            node = node[part]
        node[leaf] = value
    return choices
