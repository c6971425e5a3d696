"""A test server restarted mid-run on its port serving another model (tests of a fleet whose
server restarts: tests/test_fleet_restarts.py, tests/rl/test_scheduler_fleet.py; of a run's one
server: tests/test_one_server_restarts.py, tests/rl/test_scheduler_one_server.py), and the
``restarting`` fixture that stops those a test made."""

from __future__ import annotations

import threading

import pytest
from llm_server import LLMServer


def echo(body):
    """A reply the lake takes: one move."""
    return {"reply": "<answer>Right</answer>"}


class Restarting:
    """A test server that, at its ``at``-th request, is restarted on its port serving
    ``models`` (its old self answers that request with ``failure``, as it dies); ``at=None``:
    when the test calls ``restart``. ``down_s``: how long nothing listens there between the
    two (a real server's restart loads its model: seconds). Not 0: a request another env loop
    sends in the instant between the new server's start and the failed request's answer would
    reach it before any client could know of the restart, which no real restart allows."""

    def __init__(self, failure: dict, at: int | None = 2, models: tuple[str, ...] = ("other-model",),
                 policy=echo, served: str = "test-model", down_s: float = 0.2) -> None:
        self.failure, self.at, self.models, self.policy = failure, at, list(models), policy
        self.down_s = down_s
        self.old = LLMServer(policy=self._answer)
        if served not in self.old.models:
            self.old.models.append(served)
        self.old.start()
        self.url = self.old.url
        self.new: LLMServer | None = None
        #: set once the old server stopped, and once the new one is up
        self.died, self.restarted = threading.Event(), threading.Event()
        self._stopping = threading.Event()
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
        start the new one on its port ``down_s`` later, in a thread of its own (``restarted``)."""
        self.old.stop()
        self.died.set()
        threading.Thread(target=self._come_back, daemon=True).start()

    def _come_back(self) -> None:
        if self._stopping.wait(self.down_s):  # the test ended first: nothing to start
            return
        new = LLMServer(policy=self.policy, port=self.old._httpd.server_address[1])
        new.models = list(self.models)
        with self._lock:
            if self._stopping.is_set():
                new._httpd.server_close()  # never served: its port freed
                return
            self.new = new.start()
        self.restarted.set()

    def holding(self, policy):
        """``policy`` for another server of the fleet, whose answers wait while this one is
        down: the run outlasts the restart, and the restarted server is there to be asked."""

        def answer(body):
            if self.died.is_set():
                self.restarted.wait(30)
            return policy(body)

        return answer

    def sampled(self) -> list[str]:
        """The completion requests the restarted server got (none is right)."""
        return [r["path"] for r in (self.new.requests if self.new else []) if r["path"].endswith("completions")]

    def stop(self) -> None:
        with self._lock:
            self._stopping.set()
        self.old.stop()
        if self.new is not None:
            self.new.stop()


#: the ways a restart shows to the request in flight: the connection closed without an answer,
#: a proxy's 502 while the server behind it restarts
RESTART_FAILURES = {"hang-up": {"hang_up": True}, "proxy-502": {"status": 502, "message": "Bad Gateway"}}


@pytest.fixture
def restarting():
    """``restarting(failure, …)``: Restarting servers, stopped after the test."""
    made: list[Restarting] = []

    def start(*args, **kwargs) -> Restarting:
        made.append(Restarting(*args, **kwargs))
        return made[-1]

    yield start
    for server in made:
        server.stop()
