"""Whether to ``torch.compile`` the trunk: only when the run is long enough to pay the compile back.

Compiling fuses bias, activation and dtype casts around the trunk's matrix products, which saves a fraction
of every iteration, but the first compiled calls cost tens of seconds (tracing, then inductor's C++ or
Triton code). ``train.models.compile: auto`` therefore compares the time compiling would save over the
iterations left, measured on the run's own eager iterations, with the compile cost measured by the
benchmark (``python -m omni_sfp.bench --rows omni-sfp-mixed,omni-sfp-mixed-compiled``: the table's
"torch.compile" section gives both numbers). The runner asks after its first eager iterations, prints the
decision's reason, and compiles with :func:`compile_trunk`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CompileCost:
    """What compiling the trunk costs once and saves per iteration, as the benchmark measured it."""

    compile_s: float  # extra seconds of the first compiled update over the eager one (tracing + code generation)
    saving: float  # fraction of an eager iteration's time that the compiled trunk saves
    source: str  # where the numbers come from


# Measured (docs/benchmarks.md, "torch.compile"): the cpu preset's big network, 2 CPU cores, torch 2.13.
# No measurement exists for CUDA yet, so auto stays eager there (and says so).
MEASURED: dict[tuple[str, bool], CompileCost] = {
    ("cpu", False): CompileCost(25.3, 0.045, "cpu preset, fp32, AMD EPYC with avx512_bf16, 2026-12-02"),
    ("cpu", True): CompileCost(10.8, 0.13, "cpu preset, bf16, AMD EPYC with avx512_bf16, 2026-12-02"),
}


@dataclass(frozen=True)
class CompileDecision:
    compile: bool
    reason: str  # one line, printed by the runner


def decide_compile(setting: bool | str, *, iterations_left: int, iteration_s: float, device_type: str,
                   mixed_precision: bool, cost: CompileCost | None = None) -> CompileDecision:
    """``setting`` is ``train.models.compile``: ``True`` / ``False`` decide by themselves; ``"auto"`` compiles
    when ``iterations_left x iteration_s x saving`` exceeds the compile cost (``cost``, or the measured one
    for this device and precision).

    :raises ValueError: ``setting`` is none of true, false, auto; or an iteration count / time is negative.
    """
    if setting is True or setting is False:
        return CompileDecision(setting, f"train.models.compile={str(setting).lower()}")
    if setting != "auto":
        raise ValueError(f"train.models.compile={setting!r} must be true, false or auto")
    if iterations_left < 0 or not iteration_s >= 0:
        raise ValueError(f"iterations_left={iterations_left} and iteration_s={iteration_s} must not be negative")
    precision = "mixed precision" if mixed_precision else "fp32"
    cost = cost or MEASURED.get((device_type, bool(mixed_precision)))
    if cost is None:
        return CompileDecision(False, f"train.models.compile=auto: eager, no measured compile cost for {device_type} "
                                      f"{precision} (set true to compile anyway)")
    saved = iterations_left * iteration_s * cost.saving
    compile = saved > cost.compile_s
    relation = ">" if compile else "<="
    return CompileDecision(compile, f"train.models.compile=auto: {'compiling' if compile else 'eager'}, "
                                    f"{iterations_left} iterations x {iteration_s:.2f} s x {100 * cost.saving:.1f}% "
                                    f"saved = {saved:.1f} s {relation} {cost.compile_s:.1f} s to compile "
                                    f"({device_type} {precision}; {cost.source})")


def compile_trunk(model: Any) -> None:
    """Compile a ``SharedActorCritic``'s MLP inside its cache (the keys stay in Python, the math is fused), or
    the networks of separate models; torch's dynamo guards are restored first (omni_sfp.coldstart)."""
    import torch

    from omni_sfp.coldstart import restore_dynamo_guards

    restore_dynamo_guards()
    cache = getattr(model, "trunk", None)
    if cache is not None and hasattr(cache, "trunk"):
        cache.trunk = torch.compile(cache.trunk)
    elif hasattr(model, "net"):
        model.net = torch.compile(model.net)
    else:
        raise TypeError(f"{type(model).__name__} has no trunk to compile")
