"""Which of several policy servers a trajectory talks to: affinity, balance, cool-down.

``base_url`` may name several OpenAI-compatible servers (``--base-url`` repeated, a TOML
list). Every request of one trajectory goes to the server chosen when it started (its
prefix cache holds the conversation) and carries the attempt's session id in a header
(``X-Session-ID`` by default, ``session_header``), so a router in front of a fleet can keep
the affinity too::

    agent.reset  ── ServerPool.acquire() ──► the least-loaded server not cooling down
    each request ── to that server, header {session_header: session id}
    a failure    ── ServerPool.fail(url) ──► out for server_cooldown; acquire() another,
                    the move recorded in the turn and the record (server_moves)
    a refusal    ── ServerPool.refuse(url) ─► the same, marked refused: a server that answers
                    401/403/404 (another model served there, a wrong entry) is that server's
                    settings, not the fleet's; the run stops only when none is left to serve
    next reset   ── ServerPool.release(url)
    left out     ── ServerPool.leave_out(urls): the servers the run's start check found not
                    serving its model (another model listed: SGLang answers any name, so no
                    request would tell), out for the run's whole length, never asked again
    first visit  ── ServerPool.first_visit(url, ask): a server the start check did not hear
                    (down then: ``ask_first``) is asked its /models by the first request to
                    reach it; one that lists another model (up later with another: no request
                    would tell either) is left out as the check's are
    a restart    ── ServerPool.ask_again(url, why): a server that failed a request as a restart
                    does (a refused or reset connection, a hang-up, a 5xx: a proxy's while the
                    server behind it restarts) is unheard again: asked its /models before it
                    takes another request, and left out if it came back with another model
    a silence    ── a server the process got no answer from for RECHECK_IDLE_S (or never) is
                    asked the same before its next request: a restart takes longer, so a
                    process that sent it nothing while it restarted (the requests of another
                    process met it; a trainer's step between two batches) still finds it
    one server   ── a pool of one (``Route.fleet`` False): asked its /models the same way, at
                    the first request, after a restart's failure and a silence; never moved
                    from, so one listing another model stops the run (``EndpointRefused``)

Load is the number of trajectories a server holds. The pool is one per set of URLs per
process (``pool_for``): every env loop of a worker process shares it; separate worker
processes (and Ray actors) balance on their own. A tie goes to the env loop's own turn in the
list (``AttemptInfo.loop``, its index in the run, modulo the servers), so N one-loop workers
spread over the servers as N loops of one worker do, instead of all taking the first; that
spreads evenly when the trajectories are alike. When every server cools down, the one whose
cool-down ends first is used (a request that fails again moves on again). One turn moves to
each server at most once (``exclude``: the servers that failed it): a cool-down shorter than a
server's retries (``--server-cooldown 0``, a hung fleet's timeouts) would otherwise send the
turn back and forth for ever, never giving up as one server's turn does.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Collection, Sequence

#: the session header's name unless ``session_header`` says another
DEFAULT_SESSION_HEADER = "X-Session-ID"
#: seconds a failed server is left out unless ``server_cooldown`` says otherwise
DEFAULT_COOLDOWN_S = 30.0
#: seconds without an answer from a server after which a process asks its /models again before
#: its next request: shorter than a restart (the old process exits, the new one loads its model),
#: so a process that had no request there while it restarted does not miss it
RECHECK_IDLE_S = 5.0


class ServerPool:
    """Trajectories held by each server, and the servers cooling down (thread-safe)."""

    def __init__(self, urls: Sequence[str], cooldown_s: float = DEFAULT_COOLDOWN_S) -> None:
        if not urls:
            raise ValueError("a ServerPool needs at least one URL")
        self.urls = tuple(urls)
        self.cooldown_s = cooldown_s
        self._load = {url: 0 for url in self.urls}
        self._down_until = {url: 0.0 for url in self.urls}
        #: until when each server counts as refusing the run's settings (``refuse``)
        self._refused_until = {url: 0.0 for url in self.urls}
        #: the servers the run's start check left out for good (``leave_out``)
        self._left_out: frozenset[str] = frozenset()
        #: the servers still to be asked whether they serve the run: those the start check did
        #: not hear (``ask_first``) or that failed since as a restart does (``ask_again``); and
        #: those asked since the start (not asked again for the start check's sake)
        self._unheard: frozenset[str] = frozenset()
        self._heard: frozenset[str] = frozenset()
        #: how often each server was made unheard again: an ask that a failure overtook is no answer
        self._asked_again = {url: 0 for url in self.urls}
        #: when each server last answered this process (a reply, or its /models): never yet
        self._answered = {url: float("-inf") for url in self.urls}
        self._lock = threading.Lock()
        #: held while one trajectory asks an unheard server: the others reaching it wait
        self._asking = {url: threading.Lock() for url in self.urls}
        #: what each server asked answered when it did not serve the run (or did not answer), or
        #: the failure that made it unheard again (``ask_again``): the words of every trajectory
        #: of the process that finds it so, not only the asking one's
        self.said: dict[str, str] = {}

    def leave_out(self, urls: Collection[str]) -> None:
        """The run's start check found ``urls`` not serving its model: never acquired again
        (unless that would leave no server, which the check refuses before any trajectory)."""
        with self._lock:
            left_out = self._left_out | (frozenset(urls) & frozenset(self.urls))
            if len(left_out) < len(self.urls):
                self._left_out = left_out

    def ask_first(self, urls: Collection[str]) -> None:
        """The run's start check did not hear ``urls`` (not up then): each is asked whether it
        serves the run the first time a trajectory reaches it (``first_visit``)."""
        with self._lock:
            self._unheard |= (frozenset(urls) & frozenset(self.urls)) - self._heard

    def ask_again(self, url: str, failed_with: str) -> None:
        """``url`` failed a request as a server that restarts does (``Retryable.may_have_restarted``),
        with the words ``failed_with``: it may be back with another model (SGLang answers any
        model name, so no request would tell), so it is unheard again, asked before its next
        request (``first_visit``). Until then ``failed_with`` is what it says (``said``): a server
        answering every request 500 answers its /models, and a request that finds it asked again
        as another's fails (no verdict) says the 500, not that the server does not answer."""
        with self._lock:
            if url in self._load and url not in self._left_out:
                self._heard -= {url}
                self._unheard |= {url}
                self._asked_again[url] += 1
                self.said[url] = failed_with

    def first_visit(self, url: str, ask: Callable[[str], bool | None]) -> bool | None:
        """Whether ``url`` may take a request: False once it is left out, None while it is
        unheard and does not answer. An unheard server (``ask_first``, ``ask_again``, or silent
        for ``RECHECK_IDLE_S``) is asked first, once per process until it is unheard again:
        ``ask(url)`` says whether it serves the run (None: no answer, so it takes no request yet
        and is asked again at the next); one that does not is left out as the start check's are
        (``leave_out``). The process's other trajectories reaching it meanwhile wait for the
        answer instead of sending it theirs."""
        verdict = self._verdict(url)  # every request but a few: no wait
        if verdict is not None:
            return verdict
        with self._asking[url]:
            verdict = self._verdict(url)  # another trajectory asked it while this one waited
            if verdict is not None:
                return verdict
            with self._lock:
                failures = self._asked_again[url]
            serves = ask(url)
            if serves is None:
                return None  # still down: asked again before the next request to it
            with self._lock:
                if serves and self._asked_again[url] != failures:
                    return None  # a request failed while it answered: what answered may be gone, asked again
                self._unheard -= {url}
                self._heard |= {url}
                self._answered[url] = time.monotonic()
            if not serves:
                self.leave_out([url])
            return bool(self._verdict(url))

    def answered(self, url: str) -> None:
        """``url`` answered a request: it serves as it did (``RECHECK_IDLE_S`` counts from here)."""
        with self._lock:
            self._answered[url] = time.monotonic()

    def _verdict(self, url: str) -> bool | None:
        """None while ``url`` is still to be asked (unheard, or silent for ``RECHECK_IDLE_S``),
        else whether it may take a request."""
        with self._lock:
            if url in self._left_out:
                return False
            silent = time.monotonic() - self._answered[url] > RECHECK_IDLE_S
            return None if url in self._unheard or silent else True

    def acquire(self, avoid: str | Collection[str] = (), turn: int = 0) -> str:
        """A server for a new (or moving) trajectory: the least-loaded one that is up, other
        than ``avoid`` (a URL or several); a tie goes to the first in the list from position
        ``turn`` (modulo the servers) on. Its load counts the trajectory until ``release``."""
        avoid = _urls(avoid)
        with self._lock:
            now = time.monotonic()
            serving = [u for u in self.urls if u not in self._left_out]
            candidates = [u for u in serving if u not in avoid] or serving
            up = [u for u in candidates if self._down_until[u] <= now]
            if up:
                # ties from position `turn` on: turn 0 (one trajectory alone) uses the first
                count = len(self.urls)
                url = min(up, key=lambda u: (self._load[u], (self.urls.index(u) - turn) % count))
            else:
                url = min(candidates, key=lambda u: self._down_until[u])
            self._load[url] += 1
            return url

    def release(self, url: str) -> None:
        """A trajectory on ``url`` ended (or moved away)."""
        with self._lock:
            if self._load.get(url, 0) > 0:
                self._load[url] -= 1

    def fail(self, url: str) -> None:
        """``url`` failed: leave it out of ``acquire`` for the cool-down."""
        with self._lock:
            self._down_until[url] = time.monotonic() + self.cooldown_s

    def refuse(self, url: str) -> None:
        """``url`` refused the run's key or model: out for the cool-down as a failed server
        is, and counted as refusing meanwhile (``serving``); then tried again, as a server
        restarted with the right model would serve."""
        with self._lock:
            self._down_until[url] = self._refused_until[url] = time.monotonic() + self.cooldown_s

    def serving(self, avoid: str | Collection[str]) -> bool:
        """Whether a server other than ``avoid`` may serve the run's settings: one not
        refusing them now (up, or cooling down after another failure)."""
        avoid = _urls(avoid)
        with self._lock:
            now = time.monotonic()
            return any(u not in avoid and u not in self._left_out and self._refused_until[u] <= now
                       for u in self.urls)

    def refusing(self) -> frozenset[str]:
        """The servers that refused the run's settings within their cool-down."""
        with self._lock:
            now = time.monotonic()
            return frozenset(u for u in self.urls if self._refused_until[u] > now)

    def available(self, avoid: str | Collection[str]) -> bool:
        """Whether a server other than ``avoid`` (a URL or several) is up (worth moving to)."""
        avoid = _urls(avoid)
        with self._lock:
            now = time.monotonic()
            return any(u not in avoid and u not in self._left_out and self._down_until[u] <= now
                       for u in self.urls)

    def load(self) -> dict[str, int]:
        """Trajectories held per server now."""
        with self._lock:
            return dict(self._load)


def _urls(value: str | Collection[str] | None) -> frozenset[str]:
    """A URL or several as a set (None: none)."""
    return frozenset([value] if isinstance(value, str) else value or ())


_pools: dict[tuple[tuple[str, ...], float], ServerPool] = {}
_pools_lock = threading.Lock()


def pool_for(urls: Sequence[str], cooldown_s: float = DEFAULT_COOLDOWN_S) -> ServerPool:
    """The process's one pool for these URLs (every agent of a worker process shares it)."""
    key = (tuple(urls), float(cooldown_s))
    with _pools_lock:
        if key not in _pools:
            _pools[key] = ServerPool(key[0], cooldown_s)
        return _pools[key]


def base_urls(value: str | Sequence[str] | None) -> list[str]:
    """``base_url`` as a list of URLs (a string is one server; None: none given)."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    return [str(item).rstrip("/") for item in items if str(item).strip()]


class Route:
    """One agent's way to the servers: the current trajectory's server, its session id and
    the moves it made (one Route per agent, so no locking beyond the pool's)."""

    def __init__(self, urls: Sequence[str], cooldown_s: float = DEFAULT_COOLDOWN_S,
                 header: str = DEFAULT_SESSION_HEADER) -> None:
        #: one server is a pool of one: asked its /models as a fleet's are (``first_visit``), never moved from
        self.pool = pool_for(urls, cooldown_s)
        #: several servers: the trajectory's server and moves are recorded, a refusal moves it on
        self.fleet = len(urls) > 1
        #: the server the trajectory's requests go to
        self.url = urls[0]
        self.header = header
        #: the trajectory's session id, sent in ``header`` with each request
        self.session = ""
        #: the trajectory's moves: {"from", "to", "reason", "at"}
        self.moves: list[dict[str, object]] = []
        #: where in the list this agent's ties start (its env loop's index in the run)
        self.turn = 0
        self._held = False

    def start(self, session: str, turn: int = 0, left_out: Collection[str] = (),
              unheard: Collection[str] = ()) -> None:
        """A new trajectory: give back the last one's server, take the least-loaded one
        (a tie from position ``turn`` of the list on) of those the run did not leave out;
        ``unheard``: those the start check did not hear, asked at their first visit."""
        self.end()
        self.turn = turn
        if self.fleet:
            if left_out:
                self.pool.leave_out(left_out)
            if unheard:
                self.pool.ask_first(unheard)
            self.url = self.pool.acquire(turn=turn)
            self._held = True
        self.session = session
        self.moves = []

    def end(self) -> None:
        """The trajectory ended: its server's load drops."""
        if self.fleet and self._held:
            self.pool.release(self.url)
            self._held = False

    def can_move(self, exclude: Collection[str] = ()) -> bool:
        """Whether another server is up to move to, not one of ``exclude`` (those that
        failed the turn already)."""
        return self.fleet and self.pool.available({self.url, *exclude})

    def can_leave_refusal(self, exclude: Collection[str] = ()) -> bool:
        """Whether another server, not one of ``exclude``, may serve what the current one
        refused (one not refusing it too)."""
        return self.fleet and self.pool.serving({self.url, *exclude})

    def move(self, reason: str, exclude: Collection[str] = (), refused: bool = False) -> dict[str, object]:
        """The current server failed (``refused``: refused the run's key or model): cool it
        down and go on at another, not one of ``exclude`` (after a refusal, not one refusing
        too); the move made (marked ``refused``)."""
        assert self.fleet
        old = self.url
        (self.pool.refuse if refused else self.pool.fail)(old)
        self.pool.release(old)
        avoid = {old, *exclude, *(self.pool.refusing() if refused else ())}
        self.url = self.pool.acquire(avoid=avoid, turn=self.turn)
        move = {"from": old, "to": self.url, "reason": reason, "at": round(time.time(), 4)}
        if refused:
            move["refused"] = True
        self.moves.append(move)
        return move

    def headers(self) -> dict[str, str]:
        """The headers every request of the trajectory carries."""
        return {self.header: self.session} if self.session else {}
