"""nr-llm sidecar: runs agent runs for a TYPO3 host and holds every run that waits."""

from importlib.metadata import PackageNotFoundError, version

try:
    # The installed package's version (pyproject.toml), so --version, health and OpenAPI never disagree.
    __version__ = version("nrllm-sidecar")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0.0.0+unknown"
