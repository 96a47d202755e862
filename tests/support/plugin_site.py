"""Plugin packages made importable to the tests without installing them into the sidecar's environment.

`make run` serves from .venv; a plugin the tests need must never land there, or the served sidecar would
load it (its routes, its permission rule). So the tests write the package's metadata (its name, version and
entry points, read from its pyproject.toml) into a directory of their own, and put that directory and the
package's source on the import path of this process and, through PYTHONPATH, of every process it starts.
importlib.metadata then finds the entry point exactly as it finds an installed plugin's.
"""

import atexit
import os
import shutil
import sys
import tempfile
import tomllib
from pathlib import Path


def write_metadata(site: Path, package_dir: Path) -> None:
    """The metadata pip would install for the package: its name, version and entry points."""
    project = tomllib.loads((package_dir / "pyproject.toml").read_text())["project"]
    dist = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    lines = []
    for group, points in project.get("entry-points", {}).items():
        lines.append(f"[{group}]")
        lines += [f"{name} = {value}" for name, value in points.items()]
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n")


def make_importable(*package_dirs: Path) -> Path:
    """Each package's source and entry points, visible here and in child processes; returns the site."""
    site = Path(tempfile.mkdtemp(prefix="nrllm-test-plugins-"))
    atexit.register(shutil.rmtree, site, ignore_errors=True)
    paths = [str(site)]
    for package_dir in package_dirs:
        write_metadata(site, package_dir)
        paths.append(str(package_dir))
    sys.path[:0] = paths
    os.environ["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [os.environ.get("PYTHONPATH")] if p])
    return site
