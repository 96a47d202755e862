"""The wheel installs only the project's own top-level names: compat/ and plugins/ keep their folders in the
repository but install as nrllm_sidecar_compat and nrllm_sidecar_plugins (pyproject.toml), never as the
top-level `compat` and `plugins` another distribution could own too."""

import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.support import ROOT

OWN_NAMES = {"sidecar", "nrllm_sidecar_compat", "nrllm_sidecar_plugins"}
FOLDERS = {"sidecar": "sidecar", "compat": "nrllm_sidecar_compat", "plugins": "nrllm_sidecar_plugins"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    # Built from a copy, so the build leaves nothing in the checkout; without isolation, so nothing is downloaded.
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", *FOLDERS):
        origin = ROOT / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(origin, source / name)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(out), str(source)], check=True, capture_output=True, timeout=240)
    (built,) = out.glob("nrllm_sidecar-*.whl")
    with zipfile.ZipFile(built) as archive:
        yield archive


def _top_level_names(archive: zipfile.ZipFile) -> set[str]:
    return {name.split("/")[0] for name in archive.namelist() if ".dist-info" not in name.split("/")[0]}


def test_the_wheel_installs_only_the_projects_own_top_level_names(wheel):
    assert _top_level_names(wheel) == OWN_NAMES
    (top_level,) = [name for name in wheel.namelist() if name.endswith(".dist-info/top_level.txt")]
    assert set(wheel.read(top_level).decode().split()) == OWN_NAMES


def test_every_package_folder_of_the_checkout_is_in_the_wheel(wheel):
    """pyproject.toml lists the packages by hand (a renamed folder needs it): a new subpackage must be added."""
    files = set(wheel.namelist())
    missing = []
    for folder, installed_as in FOLDERS.items():
        for module in sorted((ROOT / folder).rglob("*.py")):
            relative = module.relative_to(ROOT / folder).as_posix()
            if f"{installed_as}/{relative}" not in files:
                missing.append(f"{folder}/{relative}")
    assert missing == []


def test_the_bundled_plugins_entry_point_names_its_installed_module(wheel):
    (entry_points,) = [name for name in wheel.namelist() if name.endswith(".dist-info/entry_points.txt")]
    assert "nr_mcp_agent = nrllm_sidecar_plugins.nr_mcp_agent" in wheel.read(entry_points).decode()
