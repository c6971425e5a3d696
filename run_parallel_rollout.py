#!/usr/bin/env python3
"""Entry point with the original runner's name: the same CLI as `parallel-rollout run`."""

import os
import sys

if __name__ == "__main__":
    # Let a plain checkout run without installing the package.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "src"))
    from parallel_rollout.cli import main

    main()
