"""The package as users get it: a wheel that works from any folder (tasks/ and cfg/ inside), and a light
face (importing omni_sfp loads neither torch, skrl nor anything from Omniverse)."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_is_light():
    code = (
        "import sys, omni_sfp, omni_sfp.registry; omni_sfp.registry.list_tasks(); "
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'skrl', 'carb') or m.startswith('omni.')); "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_wheel_ships_tasks_and_cfg_and_trains_from_another_folder(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(tmp_path / "dist")],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("omni_sfp-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"omni_sfp/tasks/cartpole.py", "omni_sfp/cfg/config.yaml", "omni_sfp/cfg/train/CartpolePPO.yaml",
            "omni_sfp/cfg/task/LQR60x8.yaml"} <= names
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "omni_sfp.train", "num_envs=16", "max_iterations=1", "train.ppo.mini_batches=2"],
        cwd=elsewhere, capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(target), "PATH": ""},
    )
    assert result.returncode == 0, result.stderr
    assert "Training time:" in result.stdout
    assert str(target) in subprocess.run(
        [sys.executable, "-c", "import omni_sfp; print(omni_sfp.__file__)"], cwd=elsewhere, capture_output=True,
        text=True, env={"PYTHONPATH": str(target), "PATH": ""},
    ).stdout
    assert (elsewhere / "runs" / "Cartpole").is_dir()
