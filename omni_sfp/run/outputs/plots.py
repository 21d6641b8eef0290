"""The run folder's ``learning_curve.png``, drawn from the run's history alone.

A point per iteration in which some episode finished, with its marker; a gap (no line) across iterations in
which none finished, because a straight line there would show returns nobody measured; the deterministic
evaluation(s) as separate markers at the step they were taken.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from omni_sfp.run.outputs.base import RunOutput

if TYPE_CHECKING:
    from omni_sfp.run.progress import Summary


def series(points: Iterable[tuple[int, float | None]]) -> tuple[np.ndarray, np.ndarray]:
    """Steps and returns as arrays, NaN where no episode finished (matplotlib draws no line through NaN)."""
    points = list(points)
    steps = np.array([step for step, _ in points], dtype=float)
    values = np.array([np.nan if value is None else value for _, value in points], dtype=float)
    return steps, values


def learning_curve(
    points: Iterable[tuple[int, float | None]],
    path: Path,
    *,
    title: str,
    optimal_return: float | None = None,
    evaluations: Sequence[tuple[int, float]] = (),
) -> None:
    """Write the learning curve to ``path``.

    :param points: ``(env steps, mean training return or None)`` per iteration; None (no episode finished in
        that iteration) leaves a gap.
    :param title: The figure's title (the run's summary line).
    :param optimal_return: Drawn as a dashed line when the task knows it (LQR60x8's Riccati optimum).
    :param evaluations: ``(env steps, deterministic return)`` of the evaluations taken, e.g. the final one.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps, values = series(points)
    fig, ax = plt.subplots(figsize=(7, 4))
    if not np.isnan(values).all():
        ax.plot(
            steps,
            values,
            marker="o",
            markersize=2.5,
            linewidth=1.0,  # NaN breaks the line: a gap
            label="mean episode return (training, stochastic)",
        )
    if optimal_return is not None:
        ax.axhline(optimal_return, color="k", linestyle="--", linewidth=0.8, label="optimal return (Riccati)")
    if evaluations:
        ax.plot(
            *zip(*evaluations),
            linestyle="none",
            marker="*",
            markersize=10,
            color="tab:green",
            label="deterministic evaluation",
        )
    ax.set_xlabel("environment steps")
    ax.set_ylabel("return")
    ax.set_title(title, fontsize=8)
    if ax.get_legend_handles_labels()[0]:  # nothing to label when no episode finished yet
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run_curve(summary: Summary, path: Path, *, task: str, steps_per_iteration: int) -> None:
    """A finished run's ``learning_curve.png``: its history, its final evaluation and the summary line.

    :param steps_per_iteration: Env steps per ``Progress.timestep`` (envs per process x processes).
    """
    history = summary.history
    evaluations = ()
    if summary.final_return is not None and history:
        evaluations = [(history[-1].timestep * steps_per_iteration, summary.final_return)]
    learning_curve(
        [(p.timestep * steps_per_iteration, p.mean_return) for p in history],
        path,
        title=f"{task}: {summary.line()}",
        optimal_return=summary.optimal_return,
        evaluations=evaluations,
    )


class LearningCurve(RunOutput):
    """``learning_curve.png`` in the run folder at the end of training."""

    order = 20

    def end(self, run, summary) -> None:
        if summary is not None:
            steps_per_iteration = run.env.num_envs * run.world_size
            run_curve(
                summary,
                run.run_dir / "learning_curve.png",
                task=run.cfg.task.name,
                steps_per_iteration=steps_per_iteration,
            )


def output_for(cfg, *, main: bool) -> LearningCurve | None:
    return LearningCurve() if main and not cfg.test else None
