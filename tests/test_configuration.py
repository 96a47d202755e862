"""docs/configuration.md lists every setting the sidecar reads from the environment; values that are no
number of seconds stop the command."""

import re

import pytest

from sidecar.config import Settings
from tests.support import ROOT


def _variables_read() -> set[str]:
    """Every NRLLM_ variable the sidecar's code reads: through Settings.from_env or os.environ."""
    read = re.compile(r"""(?:_env\(env, |env\.get\(|environ\.get\()(?:"|')(NRLLM_[A-Z_]+)(?:"|')""")
    return {name for path in (ROOT / "sidecar").rglob("*.py") for name in read.findall(path.read_text())}


def test_every_setting_read_from_the_environment_is_in_the_configuration_table():
    read = _variables_read()
    assert {"NRLLM_DATABASE_URL", "NRLLM_HEADER_TIMEOUT", "NRLLM_LOG_FORMAT", "NRLLM_FAILPOINT"} <= read
    table = set(re.findall(r"^\| \x60(NRLLM_[A-Z_]+)\x60 \|", (ROOT / "docs" / "configuration.md").read_text(), re.M))
    assert read - table == set()
    assert table - read == set(), "the table lists a variable the sidecar does not read"


@pytest.mark.parametrize("raw", ["nan", "-5", "0", "soon"])
def test_a_number_of_seconds_that_is_not_positive_stops_the_command(raw):
    with pytest.raises(SystemExit, match="NRLLM_LEASE_SECONDS"):
        Settings.from_env({"NRLLM_LEASE_SECONDS": raw})
