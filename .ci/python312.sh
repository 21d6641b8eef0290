# Sourced by tests/kit/run_kit_tests.sh and .ci/isaaclab_tier.sh: both need a Python 3.12 (the Kit 110.4 wheels and
# Isaac Lab 3 exist for 3.12 only). OMNI_SFP_PY312 names one; else pyenv's 3.12.x, then python3.12 on PATH.

is_py312() {
    [ -x "$1" ] && "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' >/dev/null 2>&1
}

find_py312() {
    local candidate
    if [ -n "${OMNI_SFP_PY312:-}" ]; then
        is_py312 "$OMNI_SFP_PY312" && { echo "$OMNI_SFP_PY312"; return; }
        echo "OMNI_SFP_PY312=$OMNI_SFP_PY312 is not a working Python 3.12" >&2
        return 1
    fi
    # pyenv's real interpreter (its python3.12 shim fails unless 3.12 is the selected version)
    if command -v pyenv >/dev/null 2>&1; then
        for candidate in "$(pyenv root)"/versions/3.12*/bin/python3.12; do
            is_py312 "$candidate" && { echo "$candidate"; return; }
        done
    fi
    for candidate in python3.12 /usr/bin/python3.12 /usr/local/bin/python3.12; do
        candidate="$(command -v "$candidate" 2>/dev/null || true)"
        [ -n "$candidate" ] && is_py312 "$candidate" && { echo "$candidate"; return; }
    done
    return 1
}
