"""nr-llm sidecar: runs agent runs for a TYPO3 host and holds every run that waits."""

__version__ = "0.1.0"
