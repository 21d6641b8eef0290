"""The training panel's controller (view-model): toggles, validation, Hydra overrides, the runner subprocess.

Plain Python with no Omniverse import, so it is tested without Kit; ``omni_sfp.kit.panel`` (the ``omni.ui``
view) and ``omni_sfp.kit.settings`` (the carb settings bridge) only bind to it.

Training runs as a subprocess of the headless runner, ``<python> -m omni_sfp.train <overrides>
progress_file=<run dir>/progress.jsonl``, so the UI never waits on it: :meth:`PanelModel.poll` (called from
Kit's update loop) reads the JSON lines the runner appends, one per iteration, and the exit status. Stop sends
SIGINT (the runner saves a checkpoint and exits), then kills the process group after ``stop_timeout_s``.

The parts it binds: :mod:`omni_sfp.config.toggles` (the toggles, a view of :mod:`omni_sfp.config.schema`, and their Hydra
overrides) and :mod:`omni_sfp.kit.launcher` (the interpreter, the process group, reading the files a run writes).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from omni_sfp.config.toggles import (
    CACHE_CHECKS,
    DEFAULTS,
    TOGGLE_BY_KEY,
    TOGGLES,
    Toggle,
    ToggleError,
    coerce,
    hydra_value,
)
from omni_sfp.config.values import checkpoint_file
from omni_sfp.kit.launcher import (
    JsonLinesTail,
    RunError,
    last_line,
    looks_like_python,
    new_process_group,
    resolve_python,
    signal_group,
)

RUNNER_MODULE = "omni_sfp.train"
STATES = ("idle", "running", "stopping", "finished", "stopped", "failed")
PROGRESS_FIELDS = ("iteration", "timestep", "sps", "mean_return", "sfp_hit_rate")  # read from progress.jsonl


@dataclass
class Readout:
    """What the panel shows about the current (or last) run."""

    state: str = "idle"  # one of STATES
    mode: str = ""  # "train" or "test"
    iteration: int | None = None
    timestep: int | None = None
    sps: float | None = None  # environment steps per second
    mean_return: float | None = None  # mean return of the episodes finished in the last iteration
    sfp_hit_rate: float | None = None  # share of value calls served from the trunk cache
    exit_code: int | None = None
    last_stderr: str = ""  # last non-empty line the runner wrote to stderr (the error, when it failed)
    bad_lines: int = 0  # progress lines that were not JSON objects
    run_dir: str = ""  # a temporary folder with progress.jsonl, stdout.log, stderr.log; kept until the next start
    command: tuple[str, ...] = ()

    def summary(self) -> str:
        """One line for the status label."""
        if self.state in ("idle", "running", "stopping"):
            return self.state if self.iteration is None else f"{self.state}: iteration {self.iteration}"
        detail = f" ({self.last_stderr})" if self.state == "failed" and self.last_stderr else ""
        return f"{self.state}, exit code {self.exit_code}{detail}"


Listener = Callable[[str, str | None], None]  # (topic: "values" | "readout", key or None)


@dataclass
class _Run:
    process: subprocess.Popen
    progress: JsonLinesTail
    stdout: Any
    stderr: Any
    stop_requested: bool = False
    kill_at: float | None = None


class PanelModel:
    """Toggle values, their Hydra overrides and at most one runner subprocess, observable by a view.

    :param values: initial toggles over :data:`DEFAULTS` (validated).
    :param runner_module: module run with ``-m`` (tests point it at a fake runner).
    :param pythonpath: folders put first on the runner's ``PYTHONPATH``; the checkout holding ``omni_sfp`` is
        always added, so ``-m omni_sfp.train`` runs this code.
    :param workdir: the runner's working directory (its run folders go there); default: the current one.
    :param stop_timeout_s: how long Stop waits after SIGINT before killing the process group.
    """

    def __init__(
        self,
        values: Mapping[str, Any] | None = None,
        *,
        runner_module: str = RUNNER_MODULE,
        pythonpath: Iterable[str] = (),
        workdir: str | None = None,
        stop_timeout_s: float = 10.0,
    ) -> None:
        self._values: dict[str, Any] = dict(DEFAULTS)
        self._listeners: list[Listener] = []
        self.runner_module = runner_module  # module the runs start with -m
        self.pythonpath = [str(p) for p in pythonpath]  # folders put first on the runner's PYTHONPATH
        self._workdir = workdir
        self._stop_timeout_s = stop_timeout_s
        self._run: _Run | None = None
        self._scratch: Path | None = None  # the last run's temporary folder (the readout's run_dir)
        self.readout = Readout()
        if values:
            self.update(values)

    # ---- toggles ---------------------------------------------------------------------------------------
    @property
    def values(self) -> dict[str, Any]:
        return dict(self._values)

    def get(self, key: str) -> Any:
        if key not in self._values:
            raise ToggleError(key, None, f"one of the keys {', '.join(TOGGLE_BY_KEY)}")
        return self._values[key]

    def set(self, key: str, value: Any) -> bool:
        """Validate and store one toggle; listeners hear ``("values", key)`` if it changed.

        :raises ToggleError: the value is not allowed (the stored value is kept).
        """
        new = coerce(key, value)
        if self._values[key] == new:
            return False
        self._values[key] = new
        self._notify("values", key)
        return True

    def update(self, values: Mapping[str, Any]) -> list[str]:
        """Set several toggles, all or none: every value is validated before any is stored."""
        coerced = {key: coerce(key, value) for key, value in values.items()}
        return [key for key, value in coerced.items() if self.set(key, value)]

    def to_overrides(self) -> list[str]:
        """The Hydra overrides the runner gets for the current toggles, one per toggle, in table order."""
        return [f"{t.override}={hydra_value(self._values[t.key])}" for t in TOGGLES if t.override is not None]

    def tasks(self) -> list[str]:
        """Names for the task dropdown: the registry's tasks, with the current task kept in the list."""
        from omni_sfp.envs import registry  # lazily: listing stays light, but not needed to build the model

        names = registry.list_tasks()
        return names if self._values["task"] in names else [*names, self._values["task"]]

    def check_task(self) -> None:
        """Raise the registry's one-line :class:`~omni_sfp.envs.registry.UnknownTaskError` for an unknown task."""
        from omni_sfp.envs import registry

        registry.get_task(self._values["task"])

    # ---- runs ------------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._run is not None

    def command(self, *, test: bool = False, progress_file: str = "<progress_file>") -> list[str]:
        """The runner's argv for the current toggles."""
        python = resolve_python(self._values["python_exe"])
        extra = ["test=true"] if test else []
        progress = f"progress_file={hydra_value(progress_file)}"
        return [python, "-m", self.runner_module, *self.to_overrides(), *extra, progress]

    def start_training(self) -> Readout:
        """Start ``-m omni_sfp.train`` with the toggles; returns at once (the run is read by :meth:`poll`)."""
        return self._start(test=False)

    def start_test(self) -> Readout:
        """Play ``checkpoint`` without training (``test=true``): a checkpoint file or a run folder (its newest
        checkpoint), as ``python -m omni_sfp.train test=true checkpoint=...`` reads it."""
        checkpoint = self._values["checkpoint"]
        if not checkpoint:
            raise ToggleError("checkpoint", checkpoint, "a run folder or a checkpoint file (.pt) for Test")
        base = Path(self._workdir) if self._workdir else Path.cwd()
        try:
            checkpoint_file(base / checkpoint)
        except FileNotFoundError:
            raise ToggleError(
                "checkpoint",
                checkpoint,
                f"an existing run folder (with checkpoints/last.pt) or file (looked in {base})",
            ) from None
        return self._start(test=True)

    def _start(self, *, test: bool) -> Readout:
        if self._run is not None:
            raise RunError(f"a run is already {self.readout.state} (pid {self._run.process.pid}); Stop it first")
        self._remove_scratch()  # the previous run's logs: the readout moves on to this run
        run_dir = Path(tempfile.mkdtemp(prefix="omni_sfp_panel_"))
        self._scratch = run_dir
        progress = run_dir / "progress.jsonl"
        argv = self.command(test=test, progress_file=str(progress))
        stdout = open(run_dir / "stdout.log", "wb")
        stderr = open(run_dir / "stderr.log", "wb")
        try:
            process = subprocess.Popen(
                argv,
                cwd=self._workdir,
                env=self._environment(),
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                **new_process_group(),
            )
        except OSError as error:
            stdout.close()
            stderr.close()
            self._remove_scratch()
            raise RunError(f"cannot start {argv[0]}: {error.strerror or error}") from error
        self._run = _Run(process, JsonLinesTail(progress), stdout, stderr)
        mode = "test" if test else "train"
        self.readout = Readout(state="running", mode=mode, run_dir=str(run_dir), command=tuple(argv))
        self._notify("readout", None)
        return self.readout

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        checkout = str(Path(__file__).resolve().parents[2])
        paths = [*self.pythonpath, checkout, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        env["PYTHONUNBUFFERED"] = "1"  # progress and errors reach the files as they happen
        return env

    def stop(self, *, wait: bool = False, timeout: float | None = None) -> bool:
        """Ask the run to stop: SIGINT to its process group now, SIGKILL after ``stop_timeout_s``.

        Without ``wait`` it returns at once (``poll`` finishes the job); with ``wait`` it blocks until the
        run has ended, at most ``timeout`` (default ``stop_timeout_s``) before killing it. Returns whether a
        run was there to stop.
        """
        run = self._run
        if run is None:
            return False
        if not run.stop_requested:
            run.stop_requested = True
            run.kill_at = time.monotonic() + self._stop_timeout_s
            signal_group(run.process, interrupt=True)
            self.readout = replace(self.readout, state="stopping")
            self._notify("readout", None)
        if wait:
            try:
                run.process.wait(timeout=self._stop_timeout_s if timeout is None else timeout)
            except subprocess.TimeoutExpired:
                signal_group(run.process, interrupt=False)
                run.process.wait()
            self.poll()
        return True

    def poll(self) -> bool:
        """Read new progress lines and, once the runner has exited, its status. Cheap; call it every frame.

        Returns whether the readout changed.
        """
        run = self._run
        if run is None:
            return False
        changed = self._read_progress(run)
        if run.kill_at is not None and time.monotonic() >= run.kill_at and run.process.poll() is None:
            signal_group(run.process, interrupt=False)
            run.process.wait()
        code = run.process.poll()
        if code is not None:
            self._read_progress(run)
            self._finish(run, code)
            changed = True
        if changed:
            self._notify("readout", None)
        return changed

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop any run (blocking, at most ``timeout`` before the kill), remove its temporary folder and drop the
        listeners."""
        if self._run is not None:
            self.stop(wait=True, timeout=timeout)
        self._remove_scratch()
        self._listeners.clear()

    def _remove_scratch(self) -> None:
        """Remove the last run's temporary folder (the run folder itself is the runner's, under ``runs/``)."""
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def _read_progress(self, run: _Run) -> bool:
        records, bad = run.progress.read()
        fields = {name: r[name] for r in records for name in PROGRESS_FIELDS if name in r}  # the newest wins
        if not fields and not bad:
            return False
        self.readout = replace(self.readout, bad_lines=self.readout.bad_lines + bad, **fields)
        return True

    def _finish(self, run: _Run, code: int) -> None:
        run.stdout.close()
        run.stderr.close()
        self._run = None
        if run.stop_requested:
            state = "stopped"
        else:
            state = "finished" if code == 0 else "failed"
        self.readout = replace(self.readout, state=state, exit_code=code, last_stderr=last_line(Path(run.stderr.name)))

    # ---- observers -------------------------------------------------------------------------------------
    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(topic, key)`` on every change; returns the function that unsubscribes it."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    @property
    def listener_count(self) -> int:
        return len(self._listeners)

    def _notify(self, topic: str, key: str | None) -> None:
        for listener in list(self._listeners):
            listener(topic, key)


__all__ = [
    "CACHE_CHECKS",
    "DEFAULTS",
    "STATES",
    "TOGGLES",
    "TOGGLE_BY_KEY",
    "PanelModel",
    "Readout",
    "RunError",
    "Toggle",
    "ToggleError",
    "coerce",
    "hydra_value",
    "looks_like_python",
    "resolve_python",
]
