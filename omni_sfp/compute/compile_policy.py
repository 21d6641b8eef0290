"""Whether to ``torch.compile`` the trunk: only when the run is long enough to pay the compile back.

Compiling fuses bias, activation and dtype casts around the trunk's matrix products, which saves a fraction
of every iteration, but the first compiled calls cost tens of seconds (tracing, then inductor's C++ or
Triton code). ``train.models.compile: auto`` therefore compares the time compiling would save over the
iterations left, measured on the run's own eager iterations, with the compile cost measured by the
benchmark (``python -m omni_sfp.bench table --rows omni-sfp-mixed,omni-sfp-mixed-compiled``: the table's
"torch.compile" section gives both numbers). The runner asks after its first eager iterations, prints the
decision's reason, and compiles with :func:`compile_trunk`.

The table is one CPU's (an AMD EPYC with avx512_bf16), and the saving is the CPU-specific part of it. So the
decision is checked where the run happens: :class:`AutoCompile` times the second compiled iteration (the first
pays the compile) against the eager one it decided on, and goes back to eager unless the compiled one is
faster by :data:`omni_sfp.compute.cpu_choices.MARGIN`. A wrong table costs one compile, never a slower run. Measuring
it before the run instead would cost the compile itself (10-25 s on CPU): no start-up probe can afford it.
"""

from __future__ import annotations

import os
import shutil
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CompileCost:
    """What compiling the trunk costs once and saves per iteration, as the benchmark measured it."""

    compile_s: float  # extra seconds of the first compiled update over the eager one (tracing + code generation)
    saving: float  # fraction of an eager iteration's time that the compiled trunk saves
    source: str  # where the numbers come from


# Measured (docs/dev/benchmark-log.md, "torch.compile"): the cpu preset's big network, 2 CPU cores, torch 2.13.
# No measurement exists for CUDA yet, so auto stays eager there (and says so).
MEASURED: dict[tuple[str, bool], CompileCost] = {
    ("cpu", False): CompileCost(25.3, 0.045, "cpu preset, fp32, AMD EPYC with avx512_bf16, 2026-12-02"),
    ("cpu", True): CompileCost(10.8, 0.13, "cpu preset, bf16, AMD EPYC with avx512_bf16, 2026-12-02"),
}


@dataclass(frozen=True)
class CompileDecision:
    compile: bool
    reason: str  # one line, printed by the runner


def cpp_compiler() -> str | None:
    """The C++ compiler inductor would use on CPU (``$CXX``, else g++ or clang++ on the PATH), or None."""
    candidates = [os.environ["CXX"]] if os.environ.get("CXX") else ["g++", "clang++"]
    return next((path for path in map(shutil.which, candidates) if path), None)


def decide_compile(
    setting: bool | str,
    *,
    iterations_left: int,
    iteration_s: float,
    device_type: str,
    mixed_precision: bool,
    cost: CompileCost | None = None,
    name: str = "train.models.compile",
    costs: dict[tuple[str, bool], CompileCost] | None = None,
) -> CompileDecision:
    """``setting`` is ``name`` (``train.models.compile`` or ``train.capture``): ``True`` / ``False`` decide by
    themselves; ``"auto"`` compiles when ``iterations_left x iteration_s x saving`` exceeds the compile cost
    (``cost``, or the one of ``costs`` (default :data:`MEASURED`) for this device and precision).

    :raises ValueError: ``setting`` is none of true, false, auto; or an iteration count / time is negative.
    """
    if setting is True or setting is False:
        return CompileDecision(setting, f"{name}={str(setting).lower()}")
    if setting != "auto":
        raise ValueError(f"{name}={setting!r} must be true, false or auto")
    if iterations_left < 0 or not iteration_s >= 0:
        raise ValueError(f"iterations_left={iterations_left} and iteration_s={iteration_s} must not be negative")
    precision = "mixed precision" if mixed_precision else "fp32"
    if device_type == "cpu" and cpp_compiler() is None:
        return CompileDecision(
            False,
            f"{name}=auto: eager, no C++ compiler found (inductor needs one on CPU: set CXX or install g++)",
        )
    cost = cost or (MEASURED if costs is None else costs).get((device_type, bool(mixed_precision)))
    if cost is None:
        return CompileDecision(
            False,
            f"{name}=auto: eager, no measured compile cost for {device_type} {precision} (set true to compile anyway)",
        )
    saved = iterations_left * iteration_s * cost.saving
    compile = saved > cost.compile_s
    relation = ">" if compile else "<="
    return CompileDecision(
        compile,
        f"{name}=auto: {'compiling' if compile else 'eager'}, "
        f"{iterations_left} iterations x {iteration_s:.2f} s x {100 * cost.saving:.1f}% "
        f"saved = {saved:.1f} s {relation} {cost.compile_s:.1f} s to compile "
        f"({device_type} {precision}; {cost.source})",
    )


def compile_trunk(network: Any) -> None:
    """Compile a trunk's ``forward`` in place (``omni_sfp.sfp.models.trunks`` lists a model's: inside the cache,
    so its keys stay in Python and the math is fused; any spec-built network, the tuned MLP among them).

    The network stays where it is and only its ``forward`` is compiled, so its parameter names, and so the
    checkpoints, are those of the eager model: a run that ``auto`` compiled resumes or plays eager or compiled
    alike (``torch.compile(module)`` would add ``_orig_mod.`` to every name; ``nn.Module.compile()`` traces
    nothing in torch 2.13, whose dynamo skips ``Module._call_impl``). The method is bound to the network, so a
    ``copy.deepcopy`` of it runs the copy's parameters (omni_sfp.run.outputs.export strips it from its copy).
    """
    import torch

    if not isinstance(network, torch.nn.Module):
        raise TypeError(f"{type(network).__name__} is not a module to compile")
    network.forward = types.MethodType(torch.compile(type(network).forward), network)


def uncompile_trunk(network: Any) -> None:
    """Undo :func:`compile_trunk`: the network's own (eager) ``forward`` again."""
    if is_compiled(network):
        del network.forward


def is_compiled(network: Any) -> bool:
    """Whether :func:`compile_trunk` compiled this network (its ``forward`` is the compiled one)."""
    return "forward" in vars(network)


EAGER_ITERATIONS = 2  # auto measures the second: the first one pays for first calls and allocations
COMPILED_ITERATIONS = 2  # and checks the second compiled one: the first pays the compile


class MeasuredSwitch:
    """A loop ``tune`` hook (:class:`omni_sfp.ppo.loop.Learner`) for a speed setting whose ``auto`` compiles:
    after :data:`EAGER_ITERATIONS` eager iterations of this process (after a resume too), it times the last one
    (rollout + update), asks :func:`decide_compile` with the setting's cost table, reports the reason once and
    turns the speed-up on when it pays. A run that ends sooner is decided at its last iteration (nothing left:
    eager). After turning it on it times the :data:`COMPILED_ITERATIONS`-th iteration and keeps it only when
    that one is clearly faster than the eager one (one more line; ``kept`` says which). So a wrong table costs
    one compile, never a slower run.

    :param agree: turns this process's decision into every process's (``distributed.any_rank``).
    :param report: where the one-line reasons go (rank 0's console); None: nowhere.
    :param record: called with the setting's final value (True or False) once it is known (the run's config.yaml).
    """

    name = ""  # the setting
    costs: dict[tuple[str, bool], CompileCost] = {}
    kept_text, dropped_text = "kept", "back to eager"

    def __init__(
        self,
        *,
        iterations: int,
        device_type: str,
        mixed_precision: bool,
        agree: Callable[[bool], bool] = bool,
        report: Callable[[str], None] | None = None,
        record: Callable[[bool], None] | None = None,
    ) -> None:
        self.iterations, self.device_type, self.mixed_precision = iterations, device_type, mixed_precision
        self.agree, self.report, self.record = agree, report, record
        self.seen = 0  # iterations this process ran
        self.decision: CompileDecision | None = None
        self.iteration: int | None = None  # the iteration after which it was decided
        self.eager_s: float | None = None  # the eager iteration it decided on
        self.compiled_seen = 0
        self.kept: bool | None = None  # after the check: whether the speed-up stayed

    # what a setting does
    def blocked(self) -> str | None:
        """Why the speed-up cannot be turned on in this run (the decision's reason), or None."""
        return None

    def turn_on(self) -> None:
        raise NotImplementedError

    def turn_off(self) -> None:
        raise NotImplementedError

    def __call__(self, progress: Any) -> None:
        if self.decision is not None:
            if self.decision.compile and self.kept is None:
                self._check(progress)
            return
        self.seen += 1
        if self.seen < EAGER_ITERATIONS and progress.iteration < self.iterations:
            return
        blocked = self.blocked()
        if blocked is not None:
            decision = CompileDecision(False, f"{self.name}=auto: eager, {blocked}")
        else:
            decision = decide_compile(
                "auto",
                iterations_left=self.iterations - progress.iteration,
                iteration_s=progress.rollout_s + progress.update_s,
                device_type=self.device_type,
                mixed_precision=self.mixed_precision,
                name=self.name,
                costs=self.costs,
            )
        if self.agree(decision.compile) != decision.compile:  # another process decided to compile
            decision = CompileDecision(
                True, decision.reason.replace(": eager,", ": compiling (as another process decided),", 1)
            )
        self.decision, self.iteration = decision, progress.iteration
        self.eager_s = progress.rollout_s + progress.update_s
        if self.report is not None:
            self.report(f"[omni_sfp] iteration {progress.iteration}: {decision.reason}")
        if decision.compile:
            self.turn_on()
        elif self.record is not None:
            self.record(False)

    def _check(self, progress: Any) -> None:
        """The measured side of the decision: the compiled iteration against the eager one."""
        from omni_sfp.compute.cpu_choices import MARGIN

        self.compiled_seen += 1
        if self.compiled_seen < COMPILED_ITERATIONS:
            return
        compiled_s = progress.rollout_s + progress.update_s
        self.kept = bool(self.agree(compiled_s < (1 - MARGIN) * self.eager_s))  # any process's gain keeps it
        if not self.kept:
            self.turn_off()
        if self.record is not None:
            self.record(self.kept)
        if self.report is not None:
            change = 100 * (compiled_s / self.eager_s - 1) if self.eager_s else 0.0
            self.report(
                f"[omni_sfp] iteration {progress.iteration}: {self.name}=auto measured: {compiled_s:.2f} s "
                f"an iteration compiled against {self.eager_s:.2f} s eager ({change:+.1f}%): "
                + (self.kept_text if self.kept else f"{self.dropped_text} (a gain under {100 * MARGIN:.0f}% is noise)")
            )


class AutoCompile(MeasuredSwitch):
    """``train.models.compile=auto``: compiles the models' trunks (:func:`compile_trunk`).

    :param networks: the trunks to compile (``omni_sfp.sfp.models.trunks`` of each model).
    """

    name = "train.models.compile"
    costs = MEASURED
    kept_text = "compiled trunk kept"

    def __init__(self, networks: list[Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.networks = list(networks)

    def turn_on(self) -> None:
        for network in self.networks:
            compile_trunk(network)

    def turn_off(self) -> None:
        for network in self.networks:
            uncompile_trunk(network)


# What capturing the PPO step costs once and saves per iteration. CPU: measured by the benchmark (the
# omni-sfp-*-captured rows against the eager ones: python -m omni_sfp.bench table --preset cpu --rows
# omni-sfp-fp32,omni-sfp-fp32-captured). CUDA: not yet measured on a GPU; an estimate (a fresh compile
# of forward and backward, and an update that is host-bound: docs/benchmarks.md), which the measured check after
# the first captured iterations corrects either way.
CAPTURE_COSTS: dict[tuple[str, bool], CompileCost] = {
    # the cpu preset's big network is bound by its matrix products: the captured step saved nothing (-1.4%)
    ("cpu", False): CompileCost(29.1, 0.0, "cpu preset, fp32, AMD EPYC Zen 3 (AVX2), 2026-12-07"),
    ("cuda", False): CompileCost(90.0, 0.3, "estimate: not yet measured on a GPU"),
    ("cuda", True): CompileCost(90.0, 0.5, "estimate: not yet measured on a GPU"),
}


class AutoCapture(MeasuredSwitch):
    """``train.capture=auto``: captures the agent's minibatch step (``SFPPPO.set_capture``): compiled, and on
    CUDA replayed from a CUDA graph.

    :param agent: the agent (``set_capture(mode)``, ``capture_problem(graph=...)``).
    """

    name = "train.capture"
    costs = CAPTURE_COSTS
    kept_text = "captured step kept"

    def __init__(self, agent: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.agent = agent
        self.mode = "graph" if self.device_type == "cuda" else "compile"

    def blocked(self) -> str | None:
        return self.agent.capture_problem(graph=self.mode == "graph")

    def turn_on(self) -> None:
        self.agent.set_capture(self.mode)

    def turn_off(self) -> None:
        self.agent.set_capture("off")
