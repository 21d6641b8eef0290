"""The package as users get it: one set of module names whether omni_sfp runs from a wheel, an editable install or
a checkout that is not installed (Kit's --ext-folder), and a light face (importing omni_sfp, its settings schema
or the panel's controller loads neither torch, skrl, Hydra nor anything from Omniverse)."""

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Where each module resolves: omni_sfp.tasks is the root's tasks/, nothing else of the root is inside omni_sfp.
RESOLVE = """
import importlib.util, json, sys
names = ["omni_sfp", "omni_sfp.sfp.cache", "omni_sfp.tasks", "omni_sfp.tasks.cartpole", "omni_sfp.omni_sfp",
         "omni_sfp.tests", "omni_sfp.cfg", "omni_sfp.bench"]
found = {}
for name in names:
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        spec = None
    found[name] = None if spec is None else (spec.origin or list(spec.submodule_search_locations)[0])
print(json.dumps(found))
"""


def resolve(python_args, cwd, env=None):
    result = subprocess.run(
        [sys.executable, *python_args, "-c", RESOLVE], cwd=cwd, capture_output=True, text=True, timeout=60, env=env
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


LIGHT_MODULES = (
    "omni_sfp",
    "omni_sfp.config.schema",
    "omni_sfp.config.generated",
    "omni_sfp.kit",
    "omni_sfp.envs.registry",
    "omni_sfp.config.toggles",
    "omni_sfp.kit.launcher",
    "omni_sfp.kit.panel_model",
    "omni_sfp.envs.oige",
    "omni_sfp.envs.isaaclab",
)
HEAVY = ("torch", "skrl", "gymnasium", "hydra", "omegaconf", "carb", "omni.", "isaaclab", "omniisaacgymenvs")
LIGHT_IMPORT = """
import importlib, json, sys
heavy = lambda: {m for m in sys.modules if m.split('.')[0] in HEAVY or m.startswith(tuple(h for h in HEAVY if h.endswith('.')))}
pulled = {}
for name in MODULES:
    importlib.import_module(name)
    pulled[name] = sorted(heavy())
importlib.import_module("omni_sfp.envs.registry").list_tasks()  # the task sources (OIGE, Isaac Lab) load here
pulled["registry.list_tasks()"] = sorted(heavy())
print(json.dumps(pulled))
"""


def test_the_light_modules_and_the_task_listing_import_no_heavy_package():
    """The Kit extension, the panel and ``list_tasks`` run where torch, skrl, Hydra or Omniverse are absent."""
    code = f"HEAVY = {HEAVY!r}\nMODULES = {LIGHT_MODULES!r}\n{LIGHT_IMPORT}"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    pulled = json.loads(result.stdout)
    assert list(pulled) == [*LIGHT_MODULES, "registry.list_tasks()"]
    assert all(found == [] for found in pulled.values()), pulled


def test_a_checkout_that_is_not_installed_maps_only_tasks_into_the_package(tmp_path):
    """As Kit's --ext-folder or PYTHONPATH=<checkout> see it: no site-packages (-S), the checkout on sys.path."""
    found = resolve(["-S"], tmp_path, env={"PYTHONPATH": str(ROOT)})
    assert found["omni_sfp"] == str(ROOT / "omni_sfp" / "__init__.py")
    assert found["omni_sfp.tasks"] == str(ROOT / "tasks" / "__init__.py")
    assert found["omni_sfp.tasks.cartpole"] == str(ROOT / "tasks" / "cartpole.py")
    assert found["omni_sfp.omni_sfp"] is None and found["omni_sfp.tests"] is None  # no second name for anything


def test_the_editable_install_resolves_the_same_names_to_the_same_files(tmp_path):
    installed = resolve([], tmp_path)  # this venv holds the editable install (.ci/run: pip install -e .)
    checkout = resolve(["-S"], tmp_path, env={"PYTHONPATH": str(ROOT)})
    for name in ("omni_sfp", "omni_sfp.sfp.cache", "omni_sfp.tasks", "omni_sfp.tasks.cartpole", "omni_sfp.omni_sfp"):
        assert installed[name] == checkout[name], name


def _shipped_files() -> set[str]:
    """The wheel's files as the package-dir mapping lays out the checkout: tasks/ and cfg/ inside omni_sfp/."""
    files = {
        f"omni_sfp/{p.relative_to(ROOT / 'omni_sfp')}"
        for p in (ROOT / "omni_sfp").rglob("*.py")
        if "bench" not in p.relative_to(ROOT / "omni_sfp").parts
    }
    files |= {f"omni_sfp/tasks/{p.name}" for p in (ROOT / "tasks").glob("*.py")}
    files |= {f"omni_sfp/cfg/{p.relative_to(ROOT / 'cfg')}" for p in (ROOT / "cfg").rglob("*.yaml")}
    return files


@pytest.mark.slow
def test_wheel_ships_the_same_modules_without_the_benchmark_and_trains_from_another_folder(tmp_path):
    source = tmp_path / "source"  # a clean copy: no build/ or egg-info left over from earlier builds
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv*", "build", "*.egg-info", "runs", "__pycache__", ".pytest_cache", ".hypothesis"
        ),
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(source), "-w", str(tmp_path / "dist")],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = (tmp_path / "dist").glob("omni_sfp-*.whl")
    names = {n for n in zipfile.ZipFile(wheel).namelist() if not n.startswith("omni_sfp-")}  # minus .dist-info
    assert names == _shipped_files()
    assert not any(n.startswith("omni_sfp/bench/") for n in names)  # needs rl_games: run it from a checkout
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PYTHONPATH": str(target), "PATH": ""}
    found = resolve(["-S"], elsewhere, env=env)
    assert found["omni_sfp.tasks.cartpole"] == str(target / "omni_sfp" / "tasks" / "cartpole.py")
    assert found["omni_sfp.omni_sfp"] is None and found["omni_sfp.bench"] is None
    result = subprocess.run(
        [sys.executable, "-m", "omni_sfp.train", "num_envs=16", "max_iterations=1", "train.ppo.mini_batches=2"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert "Training time:" in result.stdout
    assert (elsewhere / "runs" / "Cartpole").is_dir()


def test_no_source_file_is_matched_by_gitignore():
    """A source file that .gitignore matches is left out of every commit made with ``git add -A`` (a Hydra
    ``outputs/`` rule once hid omni_sfp/run/outputs/): the ignore rules must not reach the sources."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    sources = [
        str(p.relative_to(ROOT))
        for folder in ("omni_sfp", "tasks", "cfg", "tests")
        for p in (ROOT / folder).rglob("*.py")
    ]
    sources = [s for s in sources if "__pycache__" not in s]
    result = subprocess.run(["git", "check-ignore", "--no-index", *sources], cwd=ROOT, capture_output=True, text=True)
    assert result.stdout == "", result.stdout
