"""Quality mode: does the single forward pass, or mixed precision, change what PPO learns?

Every configuration (single / double pass x fp32 / mixed) trains N seeds on learnable embedded tasks with the
real runner; the final deterministic returns are compared with Welch's t-test (unequal variances, as the
configurations may differ in spread). Single and double pass would be identical with exact arithmetic; they
differ by the order of floating-point summation in the backward pass, so runs diverge slowly, which is
why this is a statistical question.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

ALPHA = 0.05


@dataclass(frozen=True)
class QualityConfig:
    name: str
    single_forward_pass: bool
    mixed_precision: bool


CONFIGS = (
    QualityConfig("single pass, fp32", True, False),
    QualityConfig("double pass, fp32", False, False),
    QualityConfig("single pass, mixed", True, True),
    QualityConfig("double pass, mixed", False, True),
)
# (what is compared, config a, config b): each pair differs in one setting only
COMPARISONS = (
    ("single vs double pass, fp32", "single pass, fp32", "double pass, fp32"),
    ("single vs double pass, mixed", "single pass, mixed", "double pass, mixed"),
    ("mixed vs fp32, single pass", "single pass, mixed", "single pass, fp32"),
    ("mixed vs fp32, double pass", "double pass, mixed", "double pass, fp32"),
)


def welch(name: str, a: list[float], b: list[float], alpha: float = ALPHA) -> dict[str, Any]:
    """Welch's t-test of ``a`` against ``b`` and a one-line verdict."""
    mean_a, mean_b = float(np.mean(a)), float(np.mean(b))
    means = f"mean {mean_a:.2f} vs {mean_b:.2f}"
    if len(a) < 2 or len(b) < 2:
        return {"name": name, "p_value": None, "significant": None,
                "verdict": f"{name}: undetermined, needs at least 2 seeds per configuration ({means})"}
    if np.ptp(a) == 0 and np.ptp(b) == 0:  # both samples constant: the test is undefined
        same = mean_a == mean_b
        return {"name": name, "p_value": None, "significant": not same,
                "verdict": f"{name}: {'identical results' if same else 'different constant results'} ({means})"}
    p_value = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
    significant = p_value < alpha
    if significant:
        verdict = f"{name}: significant difference, {means} (Welch p={p_value:.3f} < {alpha})"
    else:
        verdict = f"{name}: no significant difference, {means} (Welch p={p_value:.3f} >= {alpha})"
    return {"name": name, "p_value": p_value, "significant": significant, "verdict": verdict}


def train_once(task: str, config: QualityConfig, seed: int, *, device: str, runs_dir: Path,
               iterations: int | None) -> dict[str, Any]:
    """One training run with the real runner; its final deterministic return and its learning curve."""
    from omni_sfp.config import load_config
    from omni_sfp.runner import Runner

    overrides = [f"task={task}", f"seed={seed}", f"device={device}", f"runs_dir={runs_dir}",
                 f"train.mixed_precision={str(config.mixed_precision).lower()}",
                 f"train.sfp.cache_check={'auto' if config.single_forward_pass else 'off'}"]
    if iterations is not None:
        overrides.append(f"max_iterations={iterations}")
    runner = Runner(load_config(overrides), disable_progressbar=True)
    summary = runner.train()
    return {"final_return": summary.final_return, "optimal_return": summary.optimal_return,
            "curve": [(p.timestep * runner.env.num_envs, p.mean_return) for p in summary.history]}


def run_quality(*, tasks: list[str], seeds: Iterable[int], device: str, runs_dir: Path, iterations: int | None,
                log: Callable[[str], None]) -> dict[str, Any]:
    """Train every configuration once per seed and task (seed-major, so machine drift hits all alike)."""
    results: dict[str, Any] = {}
    for task in tasks:
        runs: dict[str, list[dict[str, Any]]] = {c.name: [] for c in CONFIGS}
        for seed in seeds:
            for config in CONFIGS:
                run = train_once(task, config, seed, device=device, runs_dir=runs_dir, iterations=iterations)
                runs[config.name].append(run)
                log(f"[quality] {task} seed {seed} {config.name}: final return {run['final_return']}")
        finals = {name: [r["final_return"] for r in rs if r["final_return"] is not None] for name, rs in runs.items()}
        results[task] = {
            "optimal_return": runs[CONFIGS[0].name][0]["optimal_return"],
            "configs": {name: {"final_returns": f, "mean": float(np.mean(f)) if f else None,
                               "std": float(np.std(f, ddof=1)) if len(f) > 1 else None,
                               "curves": [r["curve"] for r in runs[name]]} for name, f in finals.items()},
            "tests": [welch(label, finals[a], finals[b]) for label, a, b in COMPARISONS if finals[a] and finals[b]],
        }
    return results


def markdown(report: dict[str, Any]) -> str:
    meta = report["meta"]
    lines = [f"# omni-sfp quality: {report['seeds']} seeds per configuration, {meta['date']}", "",
             f"- machine: {meta['cpu']}, device {meta['device']}; versions: torch {meta['torch']}, skrl {meta['skrl']}",
             f"- command: `{meta['command']}`", ""]
    for task, result in report["tasks"].items():
        optimal = result["optimal_return"]
        lines += [f"## {task}" + (f" (optimal return {optimal:.2f})" if optimal is not None else ""), "",
                  "| configuration | final return mean | std | seeds |", "|---|---|---|---|"]
        for name, c in result["configs"].items():
            mean = "" if c["mean"] is None else f"{c['mean']:.2f}"
            std = "" if c["std"] is None else f"{c['std']:.2f}"
            lines.append(f"| {name} | {mean} | {std} | {len(c['final_returns'])} |")
        lines += [""] + [f"- {t['verdict']}" for t in result["tests"]] + [""]
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    """Learning curves: per task, the mean episode return over seeds with a +-1 std band per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = report["tasks"]
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4), squeeze=False)
    for ax, (task, result) in zip(axes[0], tasks.items()):
        for name, c in result["configs"].items():
            curves = [curve for curve in c["curves"] if curve]
            if not curves:
                continue
            steps = np.array([s for s, _ in curves[0]])
            returns = np.array([[np.nan if r is None else r for _, r in curve] for curve in curves], dtype=float)
            seen = ~np.isnan(returns).all(axis=0)  # iterations in which some seed finished an episode
            steps, returns = steps[seen], returns[:, seen]
            mean, std = np.nanmean(returns, axis=0), np.nanstd(returns, axis=0)
            ax.plot(steps, mean, label=name)
            ax.fill_between(steps, mean - std, mean + std, alpha=0.2)
        if result["optimal_return"] is not None:
            ax.axhline(result["optimal_return"], color="k", linestyle="--", linewidth=0.8, label="optimal return")
        ax.set_title(f"{task}: {report['seeds']} seeds per configuration", fontsize=9)
        ax.set_xlabel("environment steps")
        ax.set_ylabel("mean episode return (training)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
