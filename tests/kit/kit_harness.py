"""Launch a headless Kit kernel with the omni.sfp extension and run a script in it; the script's results come
back as JSON. One Kit per call (Kit starts once per process), about a second each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: the extension's folder
EXT_ID = "omni.sfp"
KIT_ARGS = [
    "--no-window",
    "--/app/renderer/enabled=false",
    "--/app/extensions/registryEnabled=false",  # no network registry: only local extensions
    "--/app/fastShutdown=false",  # run every on_shutdown; exit with post_quit's code
]

PRELUDE = '''
import json, sys, time, traceback
import carb.settings
import omni.kit.app

RESULT = {result!r}
results = {{}}
settings = carb.settings.get_settings()
app = omni.kit.app.get_app()
manager = app.get_extension_manager()


def pump(frames=1):
    """Run Kit's update loop: a bare kernel has no run loop, so the script drives it."""
    for _ in range(frames):
        app.update()


def pump_until(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met within %s s" % timeout)
        app.update()
        time.sleep(0.01)


def done(code):
    with open(RESULT, "w") as file:
        json.dump(results, file, default=repr)
    app.post_quit(code)


try:
{body}
    done(0)
except BaseException:  # the test reads results["error"]: the failure's traceback
    results["error"] = traceback.format_exc()
    done(1)
'''


@dataclass
class KitRun:
    returncode: int
    results: dict
    log: str

    def __post_init__(self) -> None:
        assert "error" not in self.results, f"script failed in Kit:\n{self.results['error']}\n--- log ---\n{self.log}"

    def errors(self) -> list[str]:
        return [line for line in self.log.splitlines() if "[Error]" in line and "omni.sfp" in line]


def ext_folder(tmp_path: Path) -> Path:
    """A folder holding the checkout under the extension's id (Kit takes the id from the folder's name)."""
    folder = tmp_path / "exts"
    folder.mkdir(exist_ok=True)
    link = folder / EXT_ID
    if not link.exists():
        link.symlink_to(ROOT, target_is_directory=True)
    return folder


def run_kit(
    tmp_path: Path,
    body: str,
    *,
    args: tuple[str, ...] = (),
    app_file: Path | None = None,
    enable: bool = True,
    ext_folders: list[Path] | None = None,
    timeout: float = 120.0,
    env: dict | None = None,
) -> KitRun:
    """Run ``body`` (Python, indented by the harness) inside Kit after the extension started."""
    run_dir = tmp_path / f"kit_{len(list(tmp_path.glob('kit_*')))}"
    run_dir.mkdir()
    result = run_dir / "result.json"
    script = run_dir / "script.py"
    script.write_text(PRELUDE.format(result=str(result), body=textwrap.indent(textwrap.dedent(body), "    ")))
    folders = [ext_folder(tmp_path)] if ext_folders is None else ext_folders
    command = [sys.executable, "-m", "omni.kit_app"]
    if app_file is not None:
        command.append(str(app_file))
    command += [*KIT_ARGS, "--portable-root", str(run_dir / "portable")]
    for folder in folders:
        command += ["--ext-folder", str(folder)]
    if enable:
        command += ["--enable", EXT_ID]
    command += [*args, "--exec", str(script)]
    environment = {**os.environ, "OMNI_KIT_ACCEPT_EULA": "YES", "OMNI_KIT_ALLOW_ROOT": "1", **(env or {})}
    completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environment, cwd=run_dir)
    log = completed.stdout + completed.stderr
    assert result.is_file(), f"Kit exited with {completed.returncode} before the script finished:\n{log}"
    return KitRun(completed.returncode, json.loads(result.read_text()), log)
