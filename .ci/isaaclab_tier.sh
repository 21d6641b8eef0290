#!/usr/bin/env bash
# The Isaac Lab tier: tests/isaaclab_tier against the real Isaac Lab 3.0.0 (kit-less, Newton physics on the CPU)
# in its own Python 3.12 venv. Used by .ci/run; runnable by hand:
#
#     .ci/isaaclab_tier.sh [pytest args...]
#
# The venv lives outside the clone, keyed by the pinned versions, so a second run reuses it (~8 GB, ~2-3 min
# to build where absent). This package is reinstalled into it (no deps, not editable) on every run, so the
# venv never points at another clone.
#
# Environment:
#   OMNI_SFP_ISAACLAB_VENV  venv to use/create (default: ~/.cache/omni-sfp/<key>)
#   OMNI_SFP_PY312          a Python 3.12 interpreter (default: pyenv's 3.12.x, then python3.12 on PATH)
#
# Exits 0 with "SKIPPED: no Python 3.12" only when no Python 3.12 exists (Isaac Lab 3 needs it); any other
# problem (venv creation, pip install, a failing test) fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ISAACLAB_VERSION="3.0.0"
SKRL_VERSION="2.1.1"
KEY="isaaclab-${ISAACLAB_VERSION}_skrl-${SKRL_VERSION}_py3.12"
VENV="${OMNI_SFP_ISAACLAB_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/omni-sfp/$KEY}"

source "$ROOT/.ci/python312.sh"  # is_py312, find_py312

# A venv counts as built only once its marker is written (an interrupted install is redone).
if [ ! -f "$VENV/.omni-sfp-complete" ]; then
    if ! PY312="$(find_py312)"; then
        echo "SKIPPED: no Python 3.12 (Isaac Lab 3 needs Python 3.12); Isaac Lab tier not run"
        exit 0
    fi
    echo "building $VENV with $PY312 (isaaclab==$ISAACLAB_VERSION, skrl==$SKRL_VERSION; a few minutes)"
    rm -rf "$VENV"
    mkdir -p "$(dirname "$VENV")"
    "$PY312" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    # pytest<9: pytest 9 needs packaging>=24, which isaaclab's [ovphysx] extra forbids.
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        "isaaclab==$ISAACLAB_VERSION" "skrl==$SKRL_VERSION" "pytest>=7.4,<9" \
        "setuptools>=68" wheel "hydra-core>=1.3,<1.4" "omegaconf>=2.3,<2.4" "tensorboard>=2.14" "tqdm>=4.60" "matplotlib>=3.7" "scipy>=1.10"
    touch "$VENV/.omni-sfp-complete"
fi
# trimesh: Isaac Lab's terrain importer (Isaac-Ant-Direct) needs it, and isaaclab's requirements leave it out.
# Checked apart from the build so that a venv built before it was listed gets it too.
if ! "$VENV/bin/python" -c "import trimesh" 2>/dev/null; then
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "trimesh>=4"
fi

if ! log="$("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall \
        --no-build-isolation "$ROOT" 2>&1)"; then
    echo "$log" >&2
    echo "could not install omni-sfp into $VENV" >&2
    exit 1
fi

cd "$ROOT"
# isaaclab and warp write caches under $HOME and $TMPDIR; keep warp's kernel cache with the venv.
export WARP_CACHE_PATH="${WARP_CACHE_PATH:-$VENV/.warp-cache}"
export OMNI_SFP_ISAACLAB_TIER=1
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/isaaclab_tier "$@"
