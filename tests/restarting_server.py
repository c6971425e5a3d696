"""A test server restarted mid-run on its port serving another model (tests of a fleet whose
server restarts: tests/test_fleet_restarts.py, tests/rl/test_scheduler_fleet.py)."""

from __future__ import annotations

import threading

from llm_server import LLMServer


def echo(body):
    """A reply the lake takes: one move."""
    return {"reply": "<answer>Right</answer>"}


class Restarting:
    """A test server that, at its ``at``-th request, is restarted on its port serving
    ``models`` (its old self answers that request with ``failure``, as it dies); ``at=None``:
    when the test calls ``restart``."""

    def __init__(self, failure: dict, at: int | None = 2, models: tuple[str, ...] = ("other-model",),
                 policy=echo, served: str = "test-model") -> None:
        self.failure, self.at, self.models, self.policy = failure, at, list(models), policy
        self.old = LLMServer(policy=self._answer)
        if served not in self.old.models:
            self.old.models.append(served)
        self.old.start()
        self.url = self.old.url
        self.new: LLMServer | None = None
        self.restarted = threading.Event()
        self._asked = 0
        self._lock = threading.Lock()

    def _answer(self, body):
        with self._lock:
            self._asked += 1
            if self._asked != self.at:
                return self.policy(body)
            self.restart()
        return self.failure

    def restart(self) -> None:
        """Stop the old server (its open connections hang up on what they are sent next) and
        start the new one on its port."""
        self.old.stop()
        self.new = LLMServer(policy=self.policy, port=self.old._httpd.server_address[1])
        self.new.models = list(self.models)
        self.new.start()
        self.restarted.set()

    def sampled(self) -> list[str]:
        """The completion requests the restarted server got (none is right)."""
        return [r["path"] for r in (self.new.requests if self.new else []) if r["path"].endswith("completions")]

    def stop(self) -> None:
        self.old.stop()
        if self.new is not None:
            self.new.stop()


#: the ways a restart shows to the request in flight: the connection closed without an answer,
#: a proxy's 502 while the server behind it restarts
RESTART_FAILURES = {"hang-up": {"hang_up": True}, "proxy-502": {"status": 502, "message": "Bad Gateway"}}
