"""A batch's budget: how long ``get_batch`` may wait, and how much failure and filtering it
takes before it says so instead of regenerating forever.

Three things can keep a trainer's ``get_batch`` waiting without end, and each has a bound:

* **Time** — ``get_batch(..., timeout=s)`` raises ``BatchTimeout`` after ``s`` seconds, with
  what was ready and running.
* **Failures** — a group that ends with nothing to hand out because members failed (the
  inference server is down, the agent raises) is refilled: every member failed, or, under
  ``failed_member="drop"``, one did and the group was dropped then, its other members
  cancelled (whether they would have failed too is never known). ``max_failed_groups`` such
  groups *in a row* (no group in between that had a member finish) raise ``RolloutError``
  with the last failure and how many were of each kind. Whether the endpoint is down or
  members fail while it answers, the policy gate tells (it counts replies): when no model
  request got a reply since the first of those groups failed and every member failure was
  the endpoint's (``model_unavailable``: no answer within the retries), the error asks
  whether the model endpoint is up; when they failed otherwise (an agent's own error, a task
  timeout), it says what with, counted by status; when the model answered meanwhile, it says
  that members fail, not the endpoint (a request the server refuses for one member, say).
  Failures are counted across batches: a server that is down stays down. Once the bound is
  spent no new group starts (it would fail too) until a call begins afresh.
* **Filtering** — a ``group_filter`` (DAPO's dynamic sampling, ``drop_equal_rewards``) drops
  groups that teach nothing and more are generated; after ``max_filtered_groups`` dropped
  since the last batch was handed out (default: 10 batches' worth of groups, as NeMo-RL's
  ``dynamic_sampling_max_gen_batches``), ``filter_fallback`` decides: ``"raise"`` (the
  default) raises ``RolloutError``; ``"partial"`` returns the groups that passed, fewer than
  asked; when none passed, it waits for the groups still running and, if none of them
  passes, raises ``RolloutError`` too (an empty batch trains nothing). Groups dropped while
  the trainer trains (at ``async_generation_ratio`` >= 1) count toward the next batch, and
  once the bound is spent no new group starts until a batch is handed out (or a call after
  one that raised begins): nothing regenerates without end between batches either.
* **Silence** — a server that is hung or stopped (SIGSTOP, a wedged GPU) accepts connections
  and never answers: each request waits ``api_timeout_s``, is retried ``max_retries`` times,
  and the engine runs the attempt again as many times, so a member takes up to
  ``(max_retries + 1)² × api_timeout_s`` (bounded by ``task_timeout`` per attempt) to fail
  and the failure budget hours to run out. So once ``UNANSWERED_PER_LOOP`` requests per env
  loop sending (the most requests seen in flight meanwhile) in a row got no answer within
  ``api_timeout_s`` (the policy gate's ``unanswered``; a stream that stopped sending chunks
  for that long too) with no reply between, ``get_batch`` raises ``RolloutError`` asking
  whether the endpoint is up: about ``2 × api_timeout_s`` after it stopped answering. Long
  replies never count (chunks that keep coming), nor does an error answer (HTTP 4xx/5xx) or a
  refused connection (a server restarting: the retries' backoff is for it); one reply from
  any server starts the count again.

A call that raised (any of these, or another error) leaves nothing counted to the next
(``call_raised``): a trainer that catches the error and changes what caused it (its filter,
its server) gets a fresh budget from its next ``get_batch``.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from ..errors import ConfigError, RolloutError
from ..records import raised_in
from .config import check_count

#: filter_fallback's values
FILTER_FALLBACKS = ("raise", "partial")
#: groups per batch a get_batch may filter out before its fallback, by default
FILTERED_BATCHES = 10
#: requests per env loop in a row that got no answer in time, no reply between, before a
#: get_batch stops asking whether the endpoint is up (a batch run's rule: every loop's
#: attempt failed twice over)
UNANSWERED_PER_LOOP = 2
#: member statuses that are the model endpoint's failure, not the member's: it did not answer
#: within the retries (agents.episode.ModelUnavailable)
ENDPOINT_STATUSES = frozenset({"model_unavailable"})


class BatchTimeout(RolloutError):
    """get_batch waited longer than its timeout."""

    kind = "batch_timeout"


def check_timeout(timeout: Any, call: str = "get_batch") -> None:
    """ConfigError naming ``call`` unless ``timeout`` is a positive number of seconds or None."""
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not timeout > 0):
        raise ConfigError(f"{call} timeout must be a positive number of seconds or None, got {timeout!r}")


class BatchBudget:
    """One scheduler's bounds on a ``get_batch`` (see the module docstring)."""

    def __init__(self, max_failed_groups: int = 10, max_filtered_groups: int | None = None,
                 filter_fallback: str = "raise", endpoint: str = "") -> None:
        max_failed_groups = check_count("max_failed_groups", max_failed_groups, 1)
        max_filtered_groups = check_count("max_filtered_groups", max_filtered_groups, 0, optional=True)
        if filter_fallback not in FILTER_FALLBACKS:
            raise ConfigError(f"filter_fallback must be one of {', '.join(FILTER_FALLBACKS)}, got {filter_fallback!r}")
        self.max_failed_groups = max_failed_groups
        self.max_filtered_groups = max_filtered_groups
        self.filter_fallback = filter_fallback
        self.endpoint = endpoint
        #: groups failed in a row, of them those dropped for a failed member while others
        #: ran (``group_failed``), and the last member failure seen
        self.failed_in_a_row = 0
        self.dropped_in_a_row = 0
        self.last_failure = ""
        #: the statuses of the member failures since a group last had a member finish: whether
        #: they were the endpoint's (``ENDPOINT_STATUSES``) or the members' own
        self._statuses: Counter[str] = Counter()
        #: the policy gate (``watch``), and its replies when the first of those groups failed
        self._gate = None
        self._suspension = None
        self._replies_at_first = 0
        #: the gate's aborted requests when a member last finished, and whether an aborted
        #: turn is continued (``partial_rollout``) or generated again from scratch
        self._aborted_at_done = 0
        self._partial = False
        #: env loops that may send requests (``watch``); (replies, unanswered, when) at the
        #: last reply seen, where the silence count starts; the most requests seen in flight
        #: since (the loops sending: a sibling's few on a big engine wait for fewer)
        self._loops = 1
        self._silence_from: tuple[int, int, float] | None = None
        self._sending = 1
        self._filtered = 0
        #: groups ``max_version_lag`` dropped since the last batch, that bound, and how many
        #: may be (``version_lag_dropped``: ``FILTERED_BATCHES`` batches' worth)
        self._lag_dropped = 0
        self._max_lag: int | None = None
        self._lag_limit: int | None = None
        #: groups ``async_generation_ratio`` dropped as stale since the last batch, that ratio,
        #: and the step before which their groups were made (``stale_dropped``)
        self._stale = 0
        self._stale_ratio = 0
        self._stale_before = 0
        #: groups a batch may filter out (None until the first get_batch says its size)
        self._filter_limit: int | None = None
        self._deadline: float | None = None
        self._timeout: float | None = None
        #: the last get_batch raised: the next one starts afresh (``call_raised``)
        self._afresh = False
        #: a member failed for settings that do not fit the model server (``settings_failed``)
        self._settings: ConfigError | None = None

    def begin(self, groups_needed: int, timeout: float | None, called_at: float | None = None) -> bool:
        """A ``get_batch`` of ``groups_needed`` groups starts now (its ``timeout`` counted from
        ``called_at``, a monotonic time, when it waited for its turn); True when the call
        before raised, and this one starts afresh (no group failed or filtered counted)."""
        check_timeout(timeout)
        afresh, self._afresh = self._afresh, False
        if afresh:
            self._silence_from = None
            self._filtered = self._lag_dropped = self._stale = 0
            self.failed_in_a_row = self.dropped_in_a_row = 0
            self._statuses.clear()
            # members running when it raised that failed so too: a settings error the
            # trainer may have fixed since (a server restarted with the model), not this call's
            self._settings = None
        self._timeout = timeout
        self._deadline = None if timeout is None else (called_at or time.monotonic()) + timeout
        self._lag_limit = FILTERED_BATCHES * groups_needed
        self._filter_limit = (FILTERED_BATCHES * groups_needed if self.max_filtered_groups is None
                              else self.max_filtered_groups)
        return afresh

    def call_raised(self) -> None:
        """The get_batch under way raised (a spent budget, a timeout, the task source …): the
        next call starts afresh. Counting from the raise instead would let the groups that
        settle after it (those running then, dropped as their predecessors were) spend the
        next call's budget before it starts, and a spent filter starts no group: every
        later call would raise at once, whatever the trainer changed."""
        self._afresh = True

    def member_failed(self, record: dict[str, Any]) -> None:
        """Note a member's failure (what the error names if the budget runs out)."""
        failure = record.get("failure") or {}
        said = failure.get("message", "")
        if record.get("status") == "error":  # the agent's or the mode's own code: which error, and where
            where = raised_in(failure)
            said = f"{failure.get('type') or 'error'}: {said[:400]}{f' (at {where})' if where else ''}"
        self.last_failure = f"{record.get('status')}: {said}"[:700]
        self._statuses[str(record.get("status"))] += 1

    def settings_failed(self, record: dict[str, Any]) -> None:
        """Note a member that failed because the run's settings do not fit the model server
        (``agents.episode.SETTINGS_MISMATCHES``: a tokenizer folder not the served model's, a
        server that returns no token ids for token-id prompts): the next check raises it as a ConfigError. No
        batch of this scheduler can be right until the settings are (a validation's too)."""
        from ..agents.episode import SETTINGS_MISMATCHES

        failure = record.get("failure") or {}
        if failure.get("type") in SETTINGS_MISMATCHES:
            # its message names the RunConfig's fields (the engine's ``said``), not --model
            self._settings = ConfigError(f"the run config's settings do not fit the model server: "
                                         f"{failure.get('message', '')}")

    def check_settings(self) -> None:
        """Raise, once, what ``settings_failed`` noted."""
        if self._settings is not None:
            error, self._settings = self._settings, None
            raise error

    def watch(self, gate, loops: int = 1, suspension=None, partial: bool = False) -> None:
        """Read the model's replies off ``gate`` (a ``PolicyGate``): what tells an endpoint
        that is down from members that fail while it answers, and one that is silent
        (``loops``: the env loops sending requests through it); ``suspension`` (a
        ``Suspension``) names who shut it in a timeout's message; ``partial``: the run's
        ``partial_rollout`` (``_aborts_note``)."""
        self._gate = gate
        self._partial = partial
        self._aborted_at_done = self._aborted()
        self._loops = max(1, loops)
        self._suspension = suspension

    def group_failed(self, dropped: bool = False) -> None:
        """A group ended with nothing to hand out because members failed: every member did
        (completed as placeholders, or dropped once the last one failed), or, ``dropped``,
        failed_member="drop" dropped it at a failed member while others ran."""
        if self.failed_in_a_row == 0:
            self._replies_at_first = self._replies()
        self.failed_in_a_row += 1
        self.dropped_in_a_row += dropped

    def group_done(self) -> None:
        """A group had a member that did not fail: the model and envs work."""
        self.failed_in_a_row = self.dropped_in_a_row = 0
        self._statuses.clear()
        self._aborted_at_done = self._aborted()

    def _aborted(self) -> int:
        return self._gate.aborted if self._gate is not None else 0

    def _replies(self) -> int:
        return self._gate.replies if self._gate is not None else 0

    def group_filtered(self) -> None:
        """The group filter dropped a group (for the next batch, whenever it was made)."""
        self._filtered += 1

    def batch_taken(self) -> None:
        """A batch was handed out: the next one has a filter budget of its own."""
        self._filtered = self._lag_dropped = self._stale = 0

    def version_lag_dropped(self, max_lag: int | None) -> None:
        """``max_version_lag`` dropped a group. Bounded as the filter's drops are by default
        (``FILTERED_BATCHES`` batches' worth): updates that come faster than an episode ends
        drop every group, and a new one started in its place would be dropped too, for ever."""
        self._lag_dropped += 1
        self._max_lag = max_lag

    def stale_dropped(self, ratio: int, step: int) -> None:
        """``async_generation_ratio`` (``ratio``) dropped a group made before ``step - ratio``
        as stale: a cause a timeout names (steps that outrun the ratio drop every group)."""
        self._stale += 1
        self._stale_ratio, self._stale_before = ratio, step - ratio

    def filter_spent(self) -> bool:
        """Whether the filter dropped more groups since the last batch than a batch may."""
        return self._filter_limit is not None and self._filtered > self._filter_limit

    def failures_spent(self) -> bool:
        """Whether ``max_failed_groups`` groups in a row failed: no new group should start
        until a call begins afresh (against a server that is down it would fail too)."""
        return self.failed_in_a_row >= self.max_failed_groups

    def check(self, ready: int, running: int) -> None:
        """Raise when the batch cannot or must not wait any longer (failures, silence, time,
        filter with fallback ``raise``); called while get_batch waits."""
        self.check_failures()
        self.check_silence()
        if self.filter_spent() and self.filter_fallback == "raise":
            raise RolloutError(f"the group filter dropped {self._filtered} groups since the last batch "
                               f"(max_filtered_groups={self._filter_limit}); {ready} group(s) passed. "
                               "Rewards may all be equal (the policy always wins or always fails): "
                               "raise max_filtered_groups, or pass filter_fallback='partial'")
        if self.filter_spent() and self.filter_fallback == "partial" and not ready and not running:
            raise RolloutError(f"the group filter dropped {self._filtered} groups since the last batch "
                               f"(max_filtered_groups={self._filter_limit}) and none passed: filter_fallback="
                               "'partial' has no group to return (an empty batch trains nothing). Rewards may all "
                               "be equal (the policy always wins or always fails): raise max_filtered_groups")
        if self._lag_limit is not None and self._lag_dropped > self._lag_limit:
            raise RolloutError(f"max_version_lag={self._max_lag} dropped {self._lag_dropped} groups since the last "
                               f"batch (at most {self._lag_limit}: {FILTERED_BATCHES} batches' worth); {ready} group(s) "
                               "kept: policy updates (resume) come faster than a group's episodes end, so each held "
                               "tokens of a policy too old by then. Update less often, raise max_version_lag, or "
                               "pass stale_versions='keep'")
        self.check_time(ready, running)

    def check_silence(self) -> None:
        """Raise once ``UNANSWERED_PER_LOOP`` requests per env loop sending got no answer
        within their timeout, no reply between (the module docstring: a hung or stopped server)."""
        self.check_settings()
        if self._gate is None:
            return
        replies, unanswered, now = self._gate.replies, self._gate.unanswered, time.monotonic()
        if self._silence_from is None or replies != self._silence_from[0]:
            self._silence_from, self._sending = (replies, unanswered, now), 1
            return
        self._sending = min(self._loops, max(self._sending, self._gate.in_flight))
        silent = unanswered - self._silence_from[1]
        if silent >= UNANSWERED_PER_LOOP * self._sending:
            raise RolloutError(f"the model endpoint {self.endpoint or ''} answered none of the last {silent} model "
                               f"requests ({self._sending} env loop(s) sending), not even with an error, within "
                               f"api_timeout_s (or its stream stopped sending chunks for that long), and none got "
                               f"a reply for {now - self._silence_from[2]:.0f} s: is it up, or hung (stopped, a wedged GPU)? "
                               f"Last failure: {self.last_failure or 'none yet'}")

    def check_failures(self) -> None:
        """Raise once ``max_failed_groups`` groups in a row failed, saying how (every member,
        or dropped for one) and whether the model answered meanwhile (the module docstring);
        get_batch asks before it takes a batch too, so groups that failed while the trainer
        trained (placeholders, at ``async_generation_ratio`` >= 1) never make up a batch."""
        self.check_settings()
        if not self.failures_spent():
            return
        every, dropped = self.failed_in_a_row - self.dropped_in_a_row, self.dropped_in_a_row
        kinds = ([f"every member of {every} failed"] if every else []) + \
            ([f"{dropped} dropped for a failed member (failed_member='drop')"] if dropped else [])
        replies = self._replies() - self._replies_at_first
        if replies:
            hint = " (failed_member='placeholder' keeps a group whose other members finish)" if dropped else ""
            cause = (f"the model answered {replies} request(s) since the first of them failed: members fail, "
                     f"not the model endpoint{hint}.")
        else:
            cause = f"no model request got a usable reply since the first of them failed: {self._no_reply_cause()}"
        raise RolloutError(f"{self.failed_in_a_row} groups in a row failed (max_failed_groups="
                           f"{self.max_failed_groups}): {', '.join(kinds)}; {cause}{self._aborts_note()} Last failure: "
                           f"{self.last_failure or 'unknown'}")

    def _aborts_note(self) -> str:
        """Why members ran past ``task_timeout``, when the trainer's aborts kept their turns from
        ending: each aborted turn starts over without ``partial_rollout``, so updates that come
        faster than a reply leave every turn unfinished (an abort spends no retry)."""
        aborted = self._aborted() - self._aborted_at_done
        if self._partial or aborted <= 0 or "task_timeout" not in self._statuses:
            return ""
        return (f" {aborted} model request(s) were aborted by suspend(abort=True) since a member last finished, "
                "each turn generated again from scratch (partial_rollout=False): weight updates that come faster "
                "than a reply never let a turn end; RunConfig(partial_rollout=True) continues an aborted turn.")

    def _no_reply_cause(self) -> str:
        """Why nothing got a reply: the endpoint, when every member failure was its
        (``model_unavailable``: refused or reset connections, timeouts, 5xx past the retries);
        else what the members failed with (an agent's own error, a task timeout …), which
        the endpoint's state does not explain."""
        if self._statuses and set(self._statuses) <= ENDPOINT_STATUSES:
            return f"is {f'the model endpoint {self.endpoint}' if self.endpoint else 'the model endpoint'} up?"
        counts = ", ".join(f"{status} ×{count}" for status, count in self._statuses.most_common())
        if not ENDPOINT_STATUSES & set(self._statuses):
            return f"the members failed with {counts or 'nothing recorded'}, none for want of the model endpoint: " \
                "see the last failure."
        return f"the members failed with {counts}: the model endpoint is not all that fails; see the last failure."

    def check_time(self, ready: int, running: int) -> None:
        """Raise ``BatchTimeout`` once this get_batch is past its timeout."""
        if self._deadline is not None and time.monotonic() > self._deadline:
            who = self._suspension.said() if self._suspension is not None else ""
            shut = (f"; the policy gate is suspended{who} (suspend() without resume(): no model request goes out)"
                    if self._gate is not None and not self._gate.is_open else "")
            # what kept the batch from coming: groups that ended with nothing to hand out
            ended = [f"{count} {what}" for count, what in (
                (self._filtered, "filtered out by group_filter"),
                (self._lag_dropped, f"dropped for max_version_lag={self._max_lag}"),
                (self._stale, f"dropped as stale by async_generation_ratio={self._stale_ratio} "
                              f"(made at a step before {self._stale_before})"),
                (self.failed_in_a_row, "failed in a row")) if count]
            since = f"; since the last batch {', '.join(ended)}" if ended else ""
            raise BatchTimeout(f"get_batch timed out after {self._timeout:g}s with {ready} group(s) ready "
                               f"and {running} running{shut}{since};{self._aborts_note()} last failure: "
                               f"{self.last_failure or 'none'}")
