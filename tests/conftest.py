"""The tests' fixtures live in tests/support/ (its __init__ says which module holds what); they are
registered here for every test module."""

import os

import pytest

# The support's assertions explain themselves in failures as the tests' own do.
pytest.register_assert_rewrite("tests.support")

from tests.support import ROOT  # noqa: E402 - after the rewrite is registered
from tests.support.api import TEST_SECRET_KEY  # noqa: E402
from tests.support.plugin_site import make_importable  # noqa: E402

pytest_plugins = [
    "tests.support.databases",
    "tests.support.private_servers",
    "tests.support.api",
    "tests.support.workers",
    "tests.support.delegation",
]

# The example plugin is loaded through its entry point, as a third-party plugin, but never installed into
# .venv, so `make run` serves the sidecar without it (tests/support/plugin_site.py).
make_importable(ROOT / "tests" / "example_plugin")

# PostgreSQL and MariaDB need sealing keys; processes the tests start inherit this one.
os.environ["NRLLM_SECRET_KEYS"] = TEST_SECRET_KEY
