"""An agent whose module configures the root logger when it is imported, as bm25s does (a bare
``logging.warning()`` at import runs ``logging.basicConfig``), for tests/test_logs.py: the
run's own lines must not reach the console a second time through that root handler."""

from __future__ import annotations

import logging

from parallel_rollout.agents.oracle import OracleAgent

logging.warning("root-logging-plugin imported")


class RootLoggingOracle(OracleAgent):
    """The oracle; only its module's import matters."""
