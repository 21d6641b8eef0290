#!/usr/bin/env bash
# Run tests/kit in a real, headless Omniverse Kit kernel (PyPI omniverse-kit, which has wheels for Python 3.12
# only), in its own venv. Used by .ci/run; runnable by hand:
#
#     tests/kit/run_kit_tests.sh [pytest args...]
#
# Environment:
#   OMNI_SFP_KIT_VENV  venv to use/create (default: <checkout>/.venv-kit, git-ignored)
#   OMNI_SFP_PY312     a Python 3.12 interpreter (default: pyenv's 3.12.x, then python3.12 on PATH)
#
# Exits 0 with "SKIPPED: no Python 3.12" only when no Python 3.12 exists; any other problem (venv creation,
# pip install, a failing test) fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${OMNI_SFP_KIT_VENV:-$ROOT/.venv-kit}"
KIT_VERSION="110.4.0.386251"

source "$ROOT/.ci/python312.sh"  # is_py312, find_py312

if ! is_py312 "$VENV/bin/python"; then
    if ! PY312="$(find_py312)"; then
        echo "SKIPPED: no Python 3.12 (omniverse-kit has wheels for Python 3.12 only); Kit tests not run"
        exit 0
    fi
    echo "creating $VENV with $PY312"
    "$PY312" -m venv "$VENV"
fi

installed="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("omniverse-kit"))' 2>/dev/null || true)"
if [ "$installed" != "$KIT_VERSION" ] || ! "$VENV/bin/python" -c 'import pytest' >/dev/null 2>&1; then
    echo "installing omniverse-kit==$KIT_VERSION and pytest into $VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "omniverse-kit==$KIT_VERSION" "pytest>=8"
fi

cd "$ROOT"
export OMNI_KIT_ACCEPT_EULA=YES OMNI_KIT_ALLOW_ROOT=1
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
# --confcutdir: only tests/kit's conftest (the main suite's conftests may import torch, absent here)
exec "$VENV/bin/python" -m pytest tests/kit -q --confcutdir=tests/kit -p no:cacheprovider "$@"
