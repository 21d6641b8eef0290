"""The one interface of a run's outputs, and how the runner finds them.

Each output plugs into the run at the same points, which the runner (:mod:`omni_sfp.run.runner`) calls for every
output it holds, in the outputs' ``order``. ``run`` is a :class:`RunContext`, what an output may read of the run:

- ``env_options()``: what the task's env needs at creation (merged into ``task.env``), and
  ``wrap_env(env, folder)`` once it exists (``folder``: where the run's outputs go, ``RunContext.outputs_dir``);
- ``start(run)``: training starts (after a resumed checkpoint is loaded);
- ``after_iteration(run, progress)``: after each iteration's update and log;
- ``end(run, summary)``: the run finished: training (``summary`` is the run's :class:`Summary`, which an output
  may fill in, as the final evaluation fills ``final_return``) or ``test=true`` (``summary`` is None);
- ``close()``: always, also when training raised;
- ``lines()``: what the console says about it at the end.

An output is a module of this package with ``output_for(cfg, *, main) -> RunOutput | None`` (None: this run does
not ask for it; ``main``: this process writes the run folder) and, optionally, ``check_config(cfg)``, which
:func:`check_config` calls before anything is built (the runner, and ``python -m omni_sfp.train --cfg job``),
raising an :class:`OutputError` on a bad value. So adding an output is adding one file here.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from omni_sfp.ppo.loop import Progress
    from omni_sfp.run.progress import Summary


class OutputError(ValueError):
    """An output's bad setting, a missing optional package, or what it could not do: one line naming the cause
    (bad input: ``python -m omni_sfp.train`` exits 2)."""


@dataclass(frozen=True)
class RunContext:
    """What an output reads of the run it belongs to (the runner makes one once the env is wrapped)."""

    cfg: Any  # the validated config
    agent: Any  # the SFPPPO agent
    env: Any  # the env as the loop steps it (wrapped by the outputs)
    run_dir: Path | None  # the run folder (None on ranks > 0 and with test=true)
    outputs_dir: Path | None  # where videos/ and exported/ go (with test=true: the checkpoint's run folder)
    world_size: int  # processes of the run
    position: Callable[[], int]  # the iteration the run is at, read when asked

    @property
    def iteration(self) -> int:
        return self.position()


class RunOutput:
    """One thing a run leaves behind. Every hook is optional: the base does nothing."""

    order: int = 50  # the final evaluation (10) runs before the outputs that show its return

    def env_options(self) -> dict[str, Any]:
        return {}

    def wrap_env(self, env: Any, folder: Path) -> Any:
        return env

    def start(self, run: RunContext) -> None:
        pass

    def after_iteration(self, run: RunContext, progress: Progress) -> None:
        pass

    def end(self, run: RunContext, summary: Summary | None) -> None:
        pass

    def close(self) -> None:
        pass

    def lines(self) -> list[str]:
        return []


def output_modules() -> Iterator[ModuleType]:
    """This package's modules that define an output (``output_for``), in name order."""
    package = importlib.import_module(__package__)
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__package__}.{info.name}")
        if callable(getattr(module, "output_for", None)):
            yield module


def outputs_for(cfg: Any, *, main: bool) -> list[RunOutput]:
    """The outputs this config asks for, in their order."""
    found = [output for module in output_modules() if (output := module.output_for(cfg, main=main)) is not None]
    return sorted(found, key=lambda output: output.order)


def check_config(cfg: Any) -> None:
    """Every output's ``check_config`` (its keys, and that its optional packages are installed).

    :raises OutputError: the first bad value, in one line.
    """
    for module in output_modules():
        check = getattr(module, "check_config", None)
        if callable(check):
            check(cfg)
