"""``python -m omni_sfp.train -m ...``: a sweep's jobs, expanded as Hydra's basic sweeper does, and its table.

The overrides are parsed with Hydra's own override parser, so a sweep is written as in any Hydra app:
``seed=0,1,2``, ``seed=range(0,3)``, ``seed=choice(0,1)``, ``task=glob(*)``. The jobs are the cartesian
product of the sweeps in command-line order (the first key varies slowest); a key given twice keeps its first
position and its last value, as Hydra's ``BasicSweeper`` does. Nothing here runs a job: ``omni_sfp.train``
validates every job's config first, then runs them one after another in its own process, as Hydra's basic
launcher does.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from omni_sfp.config.schema import ConfigError, config_dir

if TYPE_CHECKING:
    from omni_sfp.run.progress import Summary

GROUPS = ("task", "train")  # cfg/'s config groups


def group_options(group: str) -> list[str]:
    """The options of one config group: the names of ``cfg/<group>/*.yaml``."""
    return sorted(path.stem for path in (config_dir() / group).glob("*.yaml"))


@dataclass(frozen=True)
class Job:
    """One job of a sweep: every override it runs with, and the sweep's choices among them."""

    overrides: list[str]
    swept: list[str]

    def name(self) -> str:
        """The job's sweep choices (all its overrides when nothing is swept)."""
        return " ".join(self.swept or self.overrides) or "(defaults)"


@dataclass(frozen=True)
class Outcome:
    """How one run ended: its exit code and, when training reached its end, the run's :class:`Summary`."""

    code: int
    summary: Summary | None = None
    run_dir: Path | None = None  # the run folder, also when the run failed after making it
    played_return: float | None = None  # test=true: the checkpoint's mean return


class _GroupOptions:
    """What Hydra's ``glob(...)`` sweep asks a config loader for: a group's options (cfg/<group>/*.yaml)."""

    def get_group_options(self, group_name: str, results_filter=None, config_name=None, overrides=None) -> list[str]:
        if group_name not in GROUPS:
            raise ConfigError(f"{group_name}=glob(...): glob sweeps a config group ({', '.join(GROUPS)})")
        return group_options(group_name)


def _parse(overrides: list[str]):
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from omni_sfp.run.compose import _one_line

    parser = OverridesParser.create(config_loader=_GroupOptions())
    parsed = []
    for override in overrides:  # one at a time: the error names the override
        try:
            parsed += parser.parse_overrides([override])
        except HydraException as error:
            raise ConfigError(f"{override}: {_one_line(error)}") from None
    return parsed


def refuse_sweeps(overrides: list[str]) -> None:
    """A single run given a sweep (``seed=0,1``): one line saying to add ``-m``. Overrides that do not parse are
    left to :func:`~omni_sfp.run.compose.load_config`, which names the problem."""
    from hydra.errors import HydraException

    try:
        parsed = _parse(overrides)
    except (ConfigError, HydraException):
        return
    for override in parsed:
        if override.is_sweep_override():
            raise ConfigError(
                f"{override.input_line}: a sweep (several values) needs -m (--multirun), which runs one job per "
                "value; for one value that is a list write key=[a,b], for a string with a comma quote it: key='a,b'"
            )


def expand(overrides: list[str]) -> list[Job]:
    """The jobs of ``-m <overrides>``, in Hydra's basic sweeper's order.

    :raises ConfigError: an override does not parse, or sweeps what cannot be listed (``interval(...)``).
    """
    from hydra.errors import HydraException

    choices: dict[str, list[str]] = {}  # key -> its overrides, one per value; dict order: first appearance
    swept: set[str] = set()
    for override in _parse(overrides):
        key = override.get_key_element()
        if not override.is_sweep_override():
            choices[key] = [override.input_line]  # as typed: load_config reads it as a single run would
            swept.discard(key)
            continue
        if not override.is_discrete_sweep():
            raise ConfigError(
                f"{override.input_line}: -m lists its jobs, so a sweep is a list of values, range(...), choice(...) "
                "or glob(...); interval(...) needs an optimizing sweeper"
            )
        try:
            if key == "task":  # the raw names: compose.route_task reads task=<name> as typed (gym:<Id>, no escapes)
                values = [str(value) for value in override.sweep_iterator()]
            else:
                values = list(override.sweep_string_iterator())
        except HydraException as error:
            raise ConfigError(f"{override.input_line}: {' '.join(str(error).split())}") from None
        if not values:
            raise ConfigError(f"{override.input_line}: sweeps no value")
        choices[key] = [f"{key}={value}" for value in values]
        swept.add(key)
    jobs = []
    for combination in itertools.product(*choices.values()):
        picked = [choice for key, choice in zip(choices, combination, strict=True) if key in swept]
        jobs.append(Job(overrides=list(combination), swept=picked))
    return jobs


def table(jobs: list[Job], outcomes: list[Outcome]) -> str:
    """The sweep's summary: one row per job that ran (number, sweep choices, final return, training time,
    cache hit rate, exit code, run folder)."""
    header = ("#", "overrides", "final return", "time (s)", "cache hits", "exit", "run folder")
    rows = [header]
    for number, (job, outcome) in enumerate(zip(jobs, outcomes, strict=False), start=1):
        summary = outcome.summary
        final = summary.final_return if summary is not None else outcome.played_return
        hits = summary.sfp_hit_rate if summary is not None else None
        run_dir = summary.run_dir if summary is not None and summary.run_dir is not None else outcome.run_dir
        rows.append(
            (
                str(number),
                job.name(),
                "-" if final is None else f"{final:.2f}",
                "-" if summary is None else f"{summary.training_time_s:.1f}",
                "-" if hits is None else f"{100 * hits:.1f}%",
                str(outcome.code),
                "-" if run_dir is None else str(run_dir),
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(lines)
