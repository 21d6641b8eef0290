"""The training panel's controller (view-model): toggles, validation, Hydra overrides, the runner subprocess.

Plain Python with no Omniverse import, so it is tested without Kit; ``omni_sfp.kit.panel`` (the ``omni.ui``
view) and ``omni_sfp.kit.settings`` (the carb settings bridge) only bind to it.

Training runs as a subprocess of the headless runner, ``<python> -m omni_sfp.train <overrides>
progress_file=<run dir>/progress.jsonl``, so the UI never waits on it: :meth:`PanelModel.poll` (called from
Kit's update loop) reads the JSON lines the runner appends, one per iteration, and the exit status. Stop sends
SIGINT (the runner saves a checkpoint and exits), then kills the process group after ``stop_timeout_s``.

Toggles: carb ``/exts/omni.sfp/<key>``, the manifest's ``[settings] exts."omni.sfp".<key>`` (written from
:data:`TOGGLES` by ``python -m omni_sfp.schema --write``) and one Hydra override each. Their type, range,
choices and doc come from :mod:`omni_sfp.schema`; only the carb key, the override and, where the schema's
default is null ("the task's"), the default task's value are set here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from omni_sfp import schema

CACHE_CHECKS = schema.CACHE_CHECKS
RUNNER_MODULE = "omni_sfp.train"
STATES = ("idle", "running", "stopping", "finished", "stopped", "failed")

# strings Hydra's override grammar takes verbatim; anything else is single-quoted
_BARE = re.compile(r"^[A-Za-z_/.][A-Za-z0-9_\-./:]*$")
_HYDRA_WORDS = {"true", "false", "null", "nan", "inf"}
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


class ToggleError(ValueError):
    """A toggle value that cannot be used; the message is one line naming the key, the value and what is allowed."""

    def __init__(self, key: str, value: Any, allowed: str) -> None:
        super().__init__(f"{key}={value!r} is not allowed: expected {allowed}")
        self.key, self.value, self.allowed = key, value, allowed


class RunError(RuntimeError):
    """A run cannot start (one is already running, no interpreter, no checkpoint to test)."""


@dataclass(frozen=True)
class Toggle:
    """A panel toggle: a carb key bound to one schema setting (``spec``: its type, range, choices, doc)."""

    key: str  # carb key under /exts/omni.sfp/ and the manifest key under exts."omni.sfp"
    override: str | None  # Hydra key the runner gets; None for launcher-only settings
    spec: schema.Setting  # the schema's entry, never null in the panel

    @property
    def default(self) -> Any:
        return self.spec.default

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def doc(self) -> str:
        return self.spec.doc


def _toggle(key: str, override: str | None, default: Any = None) -> Toggle:
    """Toggle ``key`` for schema setting ``override`` (or the launcher setting ``key``); ``default`` replaces a
    null schema default with the value the default task resolves it to (tests/test_manifest.py checks it)."""
    spec = schema.setting(override or key)
    value = spec.default if default is None else default
    return Toggle(key, override, replace(spec, nullable=False, default=tuple(value) if spec.kind == "ints" else value))


TOGGLES: tuple[Toggle, ...] = (
    _toggle("task", "task"),
    _toggle("num_envs", "num_envs", default=512),  # cfg/task/Cartpole.yaml env.num_envs
    _toggle("sfp_enabled", "train.sfp.enabled"),
    _toggle("cache_check", "train.sfp.cache_check"),
    _toggle("mixed_precision", "train.mixed_precision"),
    _toggle("units", "train.models.units"),
    _toggle("max_iterations", "max_iterations", default=schema.setting("train.max_iterations").default),
    _toggle("checkpoint", "checkpoint"),
    _toggle("headless", "headless"),
    _toggle("seed", "seed"),
    _toggle("device", "device"),
    _toggle("python_exe", None),
)
TOGGLE_BY_KEY: dict[str, Toggle] = {t.key: t for t in TOGGLES}
DEFAULTS: dict[str, Any] = {t.key: t.default for t in TOGGLES}


def coerce(key: str, value: Any) -> Any:
    """``value`` as toggle ``key``'s type, validated; strings (from a command line or a text field) are parsed.

    :raises ToggleError: unknown key, wrong type or a value out of range.
    """
    toggle = TOGGLE_BY_KEY.get(key)
    if toggle is None:
        raise ToggleError(key, value, f"one of the keys {', '.join(TOGGLE_BY_KEY)}")
    if toggle.kind == "bool":
        return _as_bool(toggle, value)
    if toggle.kind == "int":
        return _as_int(toggle, value)
    if toggle.kind == "ints":
        return _as_ints(toggle, value)
    return _as_str(toggle, value)


def _as_bool(toggle: Toggle, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ToggleError(toggle.key, value, toggle.spec.allowed())


def _as_int(toggle: Toggle, value: Any) -> int:
    parsed = int(value) if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value) else value
    if toggle.spec.problem(parsed) is not None:
        raise ToggleError(toggle.key, value, toggle.spec.allowed())
    return parsed


def _as_ints(toggle: Toggle, value: Any) -> tuple[int, ...]:
    items: Any = value
    if isinstance(value, str):
        text = value.strip().removeprefix("[").removesuffix("]")
        items = [int(p) if p.strip().isdigit() else p for p in text.split(",") if p.strip()]
    elif isinstance(value, (list, tuple)):
        items = [int(p) if isinstance(p, str) and p.isdigit() else p for p in value]
    if toggle.spec.problem(items) is not None:
        raise ToggleError(toggle.key, value, toggle.spec.allowed() + ", e.g. [256, 128, 64]")
    return tuple(items)


def _as_str(toggle: Toggle, value: Any) -> str:
    if toggle.spec.problem(value) is not None:
        raise ToggleError(toggle.key, value, toggle.spec.allowed())
    if "${" in value:
        raise ToggleError(toggle.key, value, "a string without '${' (Hydra would read it as an interpolation)")
    return value


def hydra_value(value: Any) -> str:
    """``value`` written in Hydra's override grammar (the runner parses it back to the same value)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, str):
        if _BARE.match(value) and value.lower() not in _HYDRA_WORDS:
            return value
        # quoted: a backslash is literal unless it precedes a quote or ends the string
        escaped = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, value).replace("'", "\\'")
        return f"'{escaped}'"
    raise TypeError(f"no Hydra form for {type(value).__name__} {value!r}")


def looks_like_python(path: str) -> bool:
    """Whether an executable's name says it is a Python interpreter (Kit's own binary is ``kit``)."""
    return re.fullmatch(r"python(\d+(\.\d+)?)?(\.exe|\.sh)?", os.path.basename(path)) is not None


def resolve_python(configured: str = "", executable: str | None = None) -> str:
    """The interpreter that runs the runner.

    ``configured`` (the ``python_exe`` setting) wins. Inside Isaac Sim, its ``python.sh`` (it sets up the
    environment Isaac Sim's Python needs): ``sys.executable`` is then the ``kit`` binary or Kit's bundled
    Python, with ``python.sh`` a few folders up. Otherwise ``sys.executable`` when it is a Python, then Kit's
    bundled ``python/bin/python3`` next to it, then ``python3`` on PATH.

    :raises RunError: nothing found, or ``configured`` is not an executable file.
    """
    if configured:
        if not _executable(Path(configured)):
            raise RunError(f"python_exe={configured!r} is not an executable file")
        return configured
    exe = executable if executable is not None else sys.executable
    if exe:
        for folder in list(Path(exe).parents)[:4]:  # <isaac-sim>/kit/kit, <isaac-sim>/kit/python/bin/python3
            if _executable(folder / "python.sh"):
                return str(folder / "python.sh")
        if looks_like_python(exe):
            return exe
        if _executable(Path(exe).parent / "python" / "bin" / "python3"):
            return str(Path(exe).parent / "python" / "bin" / "python3")
    found = shutil.which("python3")
    if found:
        return found
    raise RunError(f"no Python interpreter found ({exe!r} is not one): set /exts/omni.sfp/python_exe")


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


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
    run_dir: str = ""  # holds progress.jsonl, stdout.log, stderr.log
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
    progress: Path
    stdout: Any
    stderr: Any
    offset: int = 0
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
        from omni_sfp import registry  # lazily: listing stays light, but not needed to build the model

        names = registry.list_tasks()
        return names if self._values["task"] in names else [*names, self._values["task"]]

    def check_task(self) -> None:
        """Raise the registry's one-line :class:`~omni_sfp.registry.UnknownTaskError` for an unknown task."""
        from omni_sfp import registry

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
        """Run the policy in ``checkpoint`` without training (``test=true``)."""
        checkpoint = self._values["checkpoint"]
        if not checkpoint:
            raise ToggleError("checkpoint", checkpoint, "the path of a saved agent (.pt) for Test")
        base = Path(self._workdir) if self._workdir else Path.cwd()
        if not (base / checkpoint).is_file():
            raise ToggleError("checkpoint", checkpoint, f"an existing file (looked in {base})")
        return self._start(test=True)

    def _start(self, *, test: bool) -> Readout:
        if self._run is not None:
            raise RunError(f"a run is already {self.readout.state} (pid {self._run.process.pid}); Stop it first")
        run_dir = Path(tempfile.mkdtemp(prefix="omni_sfp_panel_"))
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
                **_new_process_group(),
            )
        except OSError as error:
            stdout.close()
            stderr.close()
            raise RunError(f"cannot start {argv[0]}: {error.strerror or error}") from error
        self._run = _Run(process, progress, stdout, stderr)
        mode = "test" if test else "train"
        self.readout = Readout(state="running", mode=mode, run_dir=str(run_dir), command=tuple(argv))
        self._notify("readout", None)
        return self.readout

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        checkout = str(Path(__file__).resolve().parent.parent)
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
            _signal_group(run.process, interrupt=True)
            self.readout = replace(self.readout, state="stopping")
            self._notify("readout", None)
        if wait:
            try:
                run.process.wait(timeout=self._stop_timeout_s if timeout is None else timeout)
            except subprocess.TimeoutExpired:
                _signal_group(run.process, interrupt=False)
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
            _signal_group(run.process, interrupt=False)
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
        """Stop any run (blocking, at most ``timeout`` before the kill) and drop the listeners."""
        if self._run is not None:
            self.stop(wait=True, timeout=timeout)
        self._listeners.clear()

    def _read_progress(self, run: _Run) -> bool:
        try:
            with open(run.progress, "rb") as file:
                file.seek(run.offset)
                chunk = file.read()
        except FileNotFoundError:
            return False
        complete = chunk.rfind(b"\n") + 1  # a line is read only once the runner has written its newline
        if complete == 0:
            return False
        run.offset += complete
        fields: dict[str, Any] = {}
        bad = 0
        for line in chunk[:complete].splitlines():
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if not isinstance(record, dict):
                bad += 1
                continue
            for name in ("iteration", "timestep", "sps", "mean_return", "sfp_hit_rate"):
                if name in record:
                    fields[name] = record[name]
        self.readout = replace(self.readout, bad_lines=self.readout.bad_lines + bad, **fields)
        return bool(fields) or bad > 0

    def _finish(self, run: _Run, code: int) -> None:
        run.stdout.close()
        run.stderr.close()
        self._run = None
        if run.stop_requested:
            state = "stopped"
        else:
            state = "finished" if code == 0 else "failed"
        self.readout = replace(self.readout, state=state, exit_code=code, last_stderr=_last_line(Path(run.stderr.name)))

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


def _new_process_group() -> dict[str, Any]:
    # its own group, so SIGINT reaches the runner behind a wrapper script (Isaac Sim's python.sh does not exec)
    if os.name == "nt":
        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}
    return {"start_new_session": True}


def _signal_group(process: subprocess.Popen, *, interrupt: bool) -> None:
    if process.poll() is not None:
        return
    if os.name == "nt":
        process.send_signal(signal.CTRL_BREAK_EVENT if interrupt else signal.SIGTERM)
        return
    try:
        os.killpg(process.pid, signal.SIGINT if interrupt else signal.SIGKILL)
    except ProcessLookupError:  # exited between poll() and killpg()
        pass


def _last_line(path: Path) -> str:
    try:
        with open(path, "rb") as file:
            file.seek(0, os.SEEK_END)
            file.seek(max(0, file.tell() - 8192))
            tail = file.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1] if lines else ""


__all__ = [
    "CACHE_CHECKS",
    "DEFAULTS",
    "STATES",
    "TOGGLES",
    "PanelModel",
    "Readout",
    "RunError",
    "Toggle",
    "ToggleError",
    "coerce",
    "hydra_value",
    "resolve_python",
]
