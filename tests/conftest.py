"""Every test process (and the training subprocesses it starts) keeps omni_sfp.compute.cpu_choices' measurements in a
temporary cache, never in the user's ~/.cache/omni-sfp."""

from __future__ import annotations

import os
import tempfile

import pytest


@pytest.fixture(autouse=True, scope="session")
def _temporary_cpu_choices_cache():
    previous = os.environ.get("XDG_CACHE_HOME")
    with tempfile.TemporaryDirectory(prefix="omni_sfp_test_cache_") as folder:
        os.environ["XDG_CACHE_HOME"] = folder
        yield folder
    if previous is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = previous
