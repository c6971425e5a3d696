"""``python -m parallel_rollout``: the same command line as ``parallel-rollout``."""

from .cli import main

if __name__ == "__main__":
    main(prog_name="parallel-rollout")
