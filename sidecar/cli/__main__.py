"""`python -m sidecar.cli`, as the console script `nrllm-sidecar`."""

from . import run

if __name__ == "__main__":
    run()
