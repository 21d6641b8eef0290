"""Running the runner from a UI: which Python, its own process group, and reading the files it writes.

Standard library only (Kit imports it). Used by :class:`omni_sfp.kit.panel_model.PanelModel`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any


class RunError(RuntimeError):
    """A run cannot start (one is already running, no interpreter, no checkpoint to test)."""


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


class JsonLinesTail:
    """Reads the JSON lines appended to a file since the last :meth:`read` (the runner's progress.jsonl).

    A line counts once its newline is written, so a line the runner is still writing is read next time.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def read(self) -> tuple[list[dict[str, Any]], int]:
        """The new JSON objects, and how many new lines were not JSON objects."""
        try:
            with open(self.path, "rb") as file:
                file.seek(self.offset)
                chunk = file.read()
        except FileNotFoundError:
            return [], 0
        complete = chunk.rfind(b"\n") + 1
        self.offset += complete
        records, bad = [], 0
        for line in chunk[:complete].splitlines():
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if isinstance(record, dict):
                records.append(record)
            else:
                bad += 1
        return records, bad


def new_process_group() -> dict[str, Any]:
    # its own group, so SIGINT reaches the runner behind a wrapper script (Isaac Sim's python.sh does not exec)
    if os.name == "nt":
        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}
    return {"start_new_session": True}


def signal_group(process: subprocess.Popen, *, interrupt: bool) -> None:
    if process.poll() is not None:
        return
    if os.name == "nt":
        process.send_signal(signal.CTRL_BREAK_EVENT if interrupt else signal.SIGTERM)
        return
    try:
        os.killpg(process.pid, signal.SIGINT if interrupt else signal.SIGKILL)
    except ProcessLookupError:  # exited between poll() and killpg()
        pass


def last_line(path: Path) -> str:
    try:
        with open(path, "rb") as file:
            file.seek(0, os.SEEK_END)
            file.seek(max(0, file.tell() - 8192))
            tail = file.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1] if lines else ""
