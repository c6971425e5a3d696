"""get_batch never spins: a timeout, a budget of failed groups that names the endpoint, and a
bound on the groups a filter may drop (rl/budget.py)."""

from __future__ import annotations

import re
import time

import pytest

from llm_server import LLMServer
from parallel_rollout.errors import ConfigError, RolloutError
from parallel_rollout.rl import BatchTimeout, EnvManagerConfig, drop_equal_rewards
from rl_support import TINY, lake_set, rl_config


def _config(tmp_path, server, **changes):
    return rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=4, max_retries=0, **changes)


def _tiny_lakes(tmp_path):
    return EnvManagerConfig(group_size=2, tags=["tiny"],
                            task_sets=lake_set(tmp_path, count=4, name="tiny", desc=TINY, max_steps=2))


@pytest.mark.parametrize("answer, says", [({"status": 500}, "500"), ({"malformed": "html page"}, "Sign in to the proxy")],
                         ids=["http-500", "html-page"])
def test_a_server_that_fails_everything_raises_naming_the_endpoint(tmp_path, schedulers, answer, says):
    """An HTML page answering every request (a proxy's login) is the endpoint's failure too:
    the error said 'none for want of the model endpoint'."""
    server = LLMServer(policy=lambda body: answer).start()
    try:
        train = schedulers(_config(tmp_path, server), _tiny_lakes(tmp_path), max_failed_groups=3)
        started = time.monotonic()
        with pytest.raises(RolloutError) as caught:
            train.get_batch(batch_size=8, step=0)
        message = str(caught.value)
        # at least 3: groups that fail together (4 run at once) are counted before it checks
        failed = re.match(r"(\d+) groups in a row failed \(max_failed_groups=3\)", message)
        assert failed and int(failed.group(1)) >= 3 and server.url in message, message
        assert says in message, message  # the last failure says what the server answered
        assert "no model request got a usable reply since the first of them failed: is the model endpoint" in message
        assert time.monotonic() - started < 60
        assert train.stats()["dropped_failed"] >= 3
    finally:
        server.stop()


def test_members_that_fail_on_their_own_raise_saying_what_they_failed_with_not_asking_for_the_endpoint(
        tmp_path, schedulers):
    """An agent whose own code fails before any model request: nothing gets a reply, yet
    the endpoint is up, and the error says what the members failed with instead of asking
    whether it is (it did, sending a trainer to a server that never saw a request)."""
    server = LLMServer(policy=lambda body: {"reply": "<answer>Right</answer>"}).start()
    try:
        train = schedulers(_config(tmp_path, server, agent="client_agents:BuggyAgent"), _tiny_lakes(tmp_path),
                           max_failed_groups=3)
        with pytest.raises(RolloutError) as caught:
            train.get_batch(batch_size=4, step=0, timeout=60)
        message = str(caught.value)
        assert re.search(r"no model request got a usable reply since the first of them failed: the members failed with "
                         r"error ×\d+, none for want of the model endpoint", message), message
        assert "the agent's own bug" in message and "up?" not in message, message
        assert server.requests == []
    finally:
        server.stop()


@pytest.mark.parametrize("agent, raised", [("BuggyAgent", "ValueError: the agent's own bug"),
                                           ("UnsendableAgent", "TypeError: the model request cannot be sent")])
def test_the_error_of_members_that_fail_on_their_own_names_the_agents_file_and_line(tmp_path, schedulers, agent,
                                                                                    raised):
    """A plugin agent's own bug (raised in its act, or by self.model.chat for the request it
    built): get_batch's error said only the message ('Last failure: error: the agent's own
    bug'), where the record's traceback has the type and the agent's line; now it says
    which error and where in the agent's file, the innermost frame of its own code."""
    import client_agents

    server = LLMServer(policy=lambda body: {"reply": "<answer>Right</answer>"}).start()
    try:
        train = schedulers(_config(tmp_path, server, agent=f"client_agents:{agent}"), _tiny_lakes(tmp_path),
                           max_failed_groups=2)
        with pytest.raises(RolloutError) as caught:
            train.get_batch(batch_size=4, step=0, timeout=60)
        message = str(caught.value)
        assert re.search(rf"Last failure: error: {re.escape(raised)}.* \(at {re.escape(client_agents.__file__)}, "
                         r"line \d+, in act\)$", message), message
        line = int(re.search(r"line (\d+), in act\)$", message).group(1))
        source = open(client_agents.__file__).read().splitlines()[line - 1]
        assert ("raise ValueError" if agent == "BuggyAgent" else "self.model.chat(") in source, source
    finally:
        server.stop()


@pytest.mark.parametrize("failed_member", ["drop", "placeholder"])
def test_a_trainer_that_fixes_its_server_after_the_failure_error_gets_a_batch(tmp_path, schedulers, failed_member):
    """The server answers 500 until the trainer, having caught the RolloutError, restarts it:
    the next get_batch hands out a batch (it used to raise the old error at once, the count
    of failed groups never reset), and none of the groups of placeholders the outage made."""
    down = {"on": True}
    server = LLMServer(policy=lambda body: {"status": 500} if down["on"] else {"reply": "<answer>Right</answer>"}).start()
    try:
        train = schedulers(_config(tmp_path, server), _tiny_lakes(tmp_path), max_failed_groups=3,
                           failed_member=failed_member, async_generation_ratio=1)
        with pytest.raises(RolloutError, match=r"groups in a row failed \(max_failed_groups=3\)"):
            train.get_batch(batch_size=8, step=0, timeout=60)  # 4 groups: placeholders would pass below 3
        deadline = time.monotonic() + 30
        while train.stats()["groups_running"]:  # the groups running at the raise fail; none starts
            assert time.monotonic() < deadline, train.stats()
            time.sleep(0.05)
        started = train.stats()["groups_started"]
        time.sleep(0.5)
        assert train.stats()["groups_started"] == started, "groups kept starting against a server that is down"
        down["on"] = False  # the trainer restarts its server
        batch = train.get_batch(batch_size=8, step=0, timeout=60)
        assert len(batch) == 8 and not any(t.placeholder or t.failed for t in batch), [t.status for t in batch]
    finally:
        server.stop()

class _FirstMemberRejected(LLMServer):
    """Every group's member 0 gets HTTP 400 (a request the server refuses, not retried) a
    moment after its other members got their replies; the others play on."""

    def next_step(self, body, authorization=None, headers=None, path=None):
        if "/m0@" in (headers or {}).get("x-session-id", ""):
            return {"sleep": 0.3, "status": 400, "message": "member 0 rejected"}
        return super().next_step(body, authorization, headers, path)


def test_groups_dropped_for_one_failed_member_raise_saying_members_fail_not_the_endpoint(tmp_path, schedulers):
    """failed_member="drop" drops a group at its first failed member, so a member that always
    fails drops every group and must still end the call, but the model answers the others:
    the error says members fail, not "is the model endpoint up?"; under "placeholder" the
    same groups complete and make batches."""
    server = _FirstMemberRejected(policy=lambda body: {"reply": "<answer>Right</answer>"}).start()
    try:
        train = schedulers(_config(tmp_path, server), _tiny_lakes(tmp_path), max_failed_groups=3)
        with pytest.raises(RolloutError) as caught:
            train.get_batch(batch_size=4, step=0, timeout=60)
        message = str(caught.value)
        assert re.match(r"\d+ groups in a row failed \(max_failed_groups=3\): \d+ dropped for a failed member",
                        message), message
        assert re.search(r"the model answered \d+ request\(s\) since the first of them failed: members fail, "
                         r"not the model endpoint", message), message
        assert "member 0 rejected" in message and "up?" not in message, message
        kept = train.sibling(_tiny_lakes(tmp_path), max_failed_groups=3, failed_member="placeholder")
        batch = kept.get_batch(batch_size=4, step=0, timeout=60)
        assert [t.placeholder for t in batch] == [True, False, True, False]
    finally:
        server.stop()

def test_a_policy_that_always_wins_stops_after_max_filtered_groups(tmp_path, schedulers):
    server = LLMServer(policy=lambda body: {"reply": "<answer>Right</answer>"}).start()  # S F G: two moves win
    try:
        train = schedulers(_config(tmp_path, server), _tiny_lakes(tmp_path), group_filter=drop_equal_rewards,
                           max_filtered_groups=3)
        with pytest.raises(RolloutError, match=r"filter dropped \d+ groups .*max_filtered_groups=3") as stopped:
            train.get_batch(batch_size=4, step=0)
        # past the limit, at once: 4, or 5 when two groups ended together (a CI run's)
        assert int(str(stopped.value).split("dropped ")[1].split()[0]) in (4, 5), stopped.value
        partial = train.sibling(_tiny_lakes(tmp_path), group_filter=drop_equal_rewards, max_filtered_groups=2,
                                filter_fallback="partial")
        # nothing passed: an empty batch (which the README's tensors() fails on) was returned
        with pytest.raises(RolloutError, match=r"filter dropped \d+ groups .*max_filtered_groups=2\) and none "
                                               r"passed: filter_fallback='partial' has no group to return"):
            partial.get_batch(batch_size=4, step=0)
        assert partial.stats().get("partial_batches", 0) == 0
        assert partial.stats()["dropped_filtered"] >= 3  # past the limit of 2 (more may finish meanwhile)
    finally:
        server.stop()


def test_drop_equal_rewards_does_not_count_a_placeholder_as_a_reward(tmp_path, schedulers):
    """One member's request is refused (its agent's error: a reward-0 placeholder), the other
    wins: the group's only real reward is 1, no GRPO signal, so drop_equal_rewards drops it.
    It was handed out, the placeholder's 0 counted as an outcome that differed from the win."""
    server = LLMServer(script=[{"status": 400, "message": "refused"}],
                       policy=lambda body: {"reply": "<answer>Right</answer>"}).start()  # S F G: two moves win
    try:
        train = schedulers(_config(tmp_path, server), _tiny_lakes(tmp_path), group_filter=drop_equal_rewards,
                           failed_member="placeholder", max_filtered_groups=6)
        with pytest.raises(RolloutError, match=r"filter dropped \d+ groups .*max_filtered_groups=6"):
            batch = train.get_batch(batch_size=2, step=0, timeout=60)
            pytest.fail(f"handed out {[(t.reward, t.placeholder) for t in batch]}")
        assert train.stats()["placeholders"] == 1 and train.stats()["dropped_filtered"] >= 7
    finally:
        server.stop()


def test_a_spent_filter_starts_nothing_while_the_trainer_trains(tmp_path, schedulers):
    """ratio 1, fallback partial: once the filter has dropped max_filtered_groups since the
    last batch and none passed, get_batch raises (never an empty batch), and no new group
    starts between the calls: only the next call regenerates, with a budget of its own."""
    server = LLMServer(policy=lambda body: {"reply": "<answer>Right</answer>"}).start()  # always wins
    try:
        train = schedulers(_config(tmp_path, server), _tiny_lakes(tmp_path), group_filter=drop_equal_rewards,
                           max_filtered_groups=2, filter_fallback="partial", async_generation_ratio=1)
        with pytest.raises(RolloutError, match="none passed"):  # never an empty batch
            train.get_batch(batch_size=4, step=0)
        time.sleep(1.0)  # the trainer trains; the groups running at the return settle
        settled = train.stats()["groups_started"]
        time.sleep(2.0)  # a tiny lake's episode takes milliseconds: regeneration would show here
        assert train.stats()["groups_started"] == settled, "groups were regenerated between batches"
        with pytest.raises(RolloutError, match="none passed"):
            train.get_batch(batch_size=4, step=1)
        assert train.stats().get("partial_batches", 0) == 0
    finally:
        server.stop()


def test_a_get_batch_that_raised_for_the_filter_leaves_the_next_one_a_fresh_budget(tmp_path, schedulers):
    """The filter drops every group until the trainer changes it: the call raises, and the
    groups that settle after it (dropped too) must not spend the next call's budget, or
    every later get_batch raised at once and no group ever started again."""
    server = LLMServer(policy=lambda body: {"reply": "<answer>Right</answer>"}).start()  # always wins
    dropping = {"on": True}
    try:
        train = schedulers(_config(tmp_path, server), _tiny_lakes(tmp_path), group_filter=lambda group: dropping["on"],
                           max_filtered_groups=2, async_generation_ratio=1)
        with pytest.raises(RolloutError, match=r"filter dropped \d+ groups .*max_filtered_groups=2"):
            train.get_batch(batch_size=4, step=0, timeout=60)
        time.sleep(1.0)  # the groups running at the raise settle, and are dropped
        assert train.stats()["groups_running"] == 0, train.stats()
        dropping["on"] = False  # the trainer changed its filter
        assert len(train.get_batch(batch_size=4, step=0, timeout=60)) == 4
    finally:
        server.stop()

def test_get_batch_times_out_and_the_scheduler_stays_usable(tmp_path, schedulers):
    slow = {"on": True}

    def policy(body):
        if slow["on"]:
            time.sleep(3)
        return {"reply": "<answer>Right</answer>"}

    server = LLMServer(policy=policy).start()
    try:
        train = schedulers(_config(tmp_path, server), _tiny_lakes(tmp_path), async_generation_ratio=1)
        started = time.monotonic()
        with pytest.raises(BatchTimeout, match=r"timed out after 0.5s with 0 group\(s\) ready"):
            train.get_batch(batch_size=2, step=0, timeout=0.5)
        assert 0.5 <= time.monotonic() - started < 2.5  # after the timeout, not before
        slow["on"] = False
        assert len(train.get_batch(batch_size=2, step=0, timeout=60)) == 2
    finally:
        server.stop()


@pytest.mark.parametrize("settings, field", [
    (dict(max_failed_groups=0), "max_failed_groups"),
    (dict(max_filtered_groups=-1), "max_filtered_groups"),
    (dict(filter_fallback="ignore"), "filter_fallback"),
])
def test_bad_budget_settings_are_refused_naming_the_field(tmp_path, schedulers, settings, field):
    server = LLMServer(policy=lambda body: {"reply": "x"})
    with pytest.raises(ConfigError, match=field):
        schedulers(_config(tmp_path, server), _tiny_lakes(tmp_path), **settings)


def test_failed_groups_made_between_batches_raise_instead_of_a_batch_of_placeholders(tmp_path, schedulers):
    """ratio 1 with placeholders: groups that fail while the trainer trains make whole batches
    of placeholders; once max_failed_groups of them failed in a row, get_batch raises rather
    than hand out a batch made only of failures."""
    down = {"on": False}
    server = LLMServer(policy=lambda body: {"status": 500} if down["on"] else {"reply": "<answer>Right</answer>"}).start()
    try:
        train = schedulers(_config(tmp_path, server), _tiny_lakes(tmp_path), async_generation_ratio=1,
                           failed_member="placeholder", max_failed_groups=3)
        assert not any(t.placeholder for t in train.get_batch(batch_size=8, step=0))
        down["on"] = True  # the server goes down while the trainer trains
        deadline = time.monotonic() + 60
        while train.stats()["groups_ready"] < 4:  # the next batch's 4 groups, every member failed
            assert time.monotonic() < deadline, train.stats()
            time.sleep(0.05)
        assert train.stats()["placeholders"] >= 3 * 2
        with pytest.raises(RolloutError, match=r"groups in a row failed .*max_failed_groups=3") as caught:
            train.get_batch(batch_size=8, step=1)
        assert server.url in str(caught.value) and "500" in str(caught.value)
    finally:
        server.stop()


def test_a_server_that_never_answers_stops_get_batch_within_two_api_timeouts(tmp_path, schedulers):
    """A hung or SIGSTOPped server accepts connections and never answers: with its retries
    and the engine's, a member took (max_retries + 1)² × api_timeout_s to fail, and the
    failure budget hours to run out. Two unanswered requests per env loop now stop it."""
    server = LLMServer(policy=lambda body: {"sleep": 300, "reply": "late"}).start()
    try:
        train = schedulers(rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=4, api_timeout_s=1.0,
                                     max_retries=3, task_timeout=600.0), _tiny_lakes(tmp_path))
        started = time.monotonic()
        with pytest.raises(RolloutError, match=r"answered none of the last \d+ model requests \([1-4] env loop\(s\) "
                                               r"sending\), not even with an error, within api_timeout_s.*is it up, "
                                               r"or hung") as caught:
            train.get_batch(batch_size=2, step=0, timeout=90)
        assert not isinstance(caught.value, BatchTimeout)
        assert time.monotonic() - started < 30
        with pytest.raises(RolloutError, match="answered none"):  # a call afresh counts afresh, and stops too
            train.get_batch(-1, step=0, timeout=90)
    finally:
        server.stop()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("then", ["stall", "keepalive"])
def test_a_stream_that_stops_after_its_first_chunk_is_the_endpoint_s_silence(tmp_path, schedulers, then):
    """A stream that stalls after its first chunk (or sends only ``: keepalive`` comments):
    the error blamed the members ("error ×10, none for want of the model endpoint … ReadTimeout")
    and the hung-endpoint check never fired; keep-alive comments kept each attempt up for its
    whole task_timeout. Now they are unanswered requests: stopped within ~2 × api_timeout_s."""
    first = {"index": 0, "delta": {"role": "assistant", "content": "<answer>"}, "finish_reason": None,
             "token_ids": [5], "logprobs": {"content": [{"token": "x", "logprob": -0.5, "top_logprobs": []}]}}
    server = LLMServer(policy=lambda body: {"chunks": [first], "prompt_token_ids": [1, 2], "then": then}).start()
    try:
        train = schedulers(rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=2, api_timeout_s=1.0,
                                     max_retries=1, task_timeout=600.0), _tiny_lakes(tmp_path))
        started = time.monotonic()
        with pytest.raises(RolloutError, match=r"answered none of the last \d+ model requests .*within api_timeout_s "
                                               r"\(or its stream stopped sending chunks for that long\).*is it up, "
                                               r"or hung"):
            train.get_batch(batch_size=2, step=0, timeout=90)
        assert time.monotonic() - started < 30
    finally:
        server.stop()


def test_replies_longer_than_the_api_timeout_are_no_silence(tmp_path, schedulers):
    """A reply streamed for longer than api_timeout_s (a long reasoning trace) never counts
    as an unanswered request: only requests that got no answer at all do."""
    server = LLMServer(policy=lambda body: {"reply": "<answer>Right</answer> " + "think " * 12},
                       token_rate=5).start()
    try:
        train = schedulers(_config(tmp_path, server, api_timeout_s=1.0), _tiny_lakes(tmp_path))
        assert len(train.get_batch(batch_size=2, step=0, timeout=120)) == 2
        assert train._shared.gate.unanswered == 0
    finally:
        server.stop()


def test_groups_whose_every_member_failed_are_failures_not_filtered(tmp_path, schedulers):
    """Under failed_member="placeholder" a group whose every member failed is all placeholders,
    which drop_equal_rewards drops: it is a failed group (dropped_failed, the failure budget's),
    not one the filter dropped. It was counted in both, and a server that is down raised "the
    group filter dropped N groups … the policy always wins or always fails" once the filter's
    budget (smaller than the failures') was spent."""
    server = LLMServer(policy=lambda body: {"status": 500}).start()
    try:
        train = schedulers(_config(tmp_path, server), _tiny_lakes(tmp_path), group_filter=drop_equal_rewards,
                           failed_member="placeholder", max_failed_groups=4, max_filtered_groups=1)
        with pytest.raises(RolloutError) as caught:
            train.get_batch(batch_size=4, step=0, timeout=60)
        message = str(caught.value)
        assert re.match(r"\d+ groups in a row failed \(max_failed_groups=4\)", message), message
        assert "is the model endpoint" in message, message
        stats = train.stats()
        assert stats.get("dropped_filtered", 0) == 0 and stats["dropped_failed"] >= 4, stats
    finally:
        server.stop()


def test_ready_groups_a_weight_update_leaves_behind_are_dropped_and_forgotten(tmp_path, schedulers):
    """ratio 1, max_version_lag=0: the group made ahead while the trainer trains is ready,
    its tokens the old version's; resume with the next version drops it (counted), and the
    gate forgets its samples (they stayed for the life of the engine)."""
    server = LLMServer(policy=lambda body: {"reply": "<answer>Right</answer>"}).start()
    try:
        train = schedulers(_config(tmp_path, server), _tiny_lakes(tmp_path), async_generation_ratio=1,
                           max_version_lag=0)
        train.get_batch(batch_size=2, step=0)
        deadline = time.monotonic() + 20
        while train.stats()["groups_ready"] < 1:
            assert time.monotonic() < deadline, train.stats()
            time.sleep(0.05)
        train.resume(policy_version=1)
        assert train.stats()["dropped_version_lag"] == 1 and train.stats()["groups_ready"] == 0
        gate = train._shared.gate
        train.close()
        assert not [key for key in gate._oldest if key.startswith(f"{train._sample_prefix}:")]
    finally:
        server.stop()


def test_a_timeout_says_the_groups_that_ended_with_nothing_since_the_last_batch(tmp_path, schedulers):
    """BatchTimeout said "0 group(s) ready and 4 running; last failure: none" while the filter
    dropped every group that finished: the trainer saw no cause of the wait."""
    server = LLMServer(policy=lambda body: {"reply": "<answer>Right</answer>"}).start()
    try:
        train = schedulers(_config(tmp_path, server), _tiny_lakes(tmp_path), group_filter=lambda group: True,
                           max_filtered_groups=100_000)
        with pytest.raises(BatchTimeout) as caught:
            train.get_batch(batch_size=4, step=0, timeout=5)
        found = re.search(r"since the last batch (\d+) filtered out by group_filter; last failure", str(caught.value))
        assert found and int(found.group(1)) >= 1, caught.value
    finally:
        server.stop()


def test_a_timeout_says_the_groups_async_generation_ratio_dropped_as_stale(tmp_path, schedulers):
    """Groups dropped as stale (made at step s, the step past s + r) were not among the
    timeout's causes: a trainer whose steps outran its ratio saw "0 group(s) ready and 2
    running; last failure: none"."""
    server = LLMServer(policy=lambda body: {"sleep": 60, "reply": "<answer>Right</answer>"}).start()
    try:
        train = schedulers(_config(tmp_path, server), _tiny_lakes(tmp_path), async_generation_ratio=1)
        with pytest.raises(BatchTimeout):
            train.get_batch(batch_size=4, step=0, timeout=2)  # its groups run on, made at step 0
        started = train.stats()["groups_started"]
        with pytest.raises(BatchTimeout) as caught:
            train.get_batch(batch_size=4, step=2, timeout=2)  # 2 > 0 + 1: every one of them is stale
        found = re.search(r"since the last batch (\d+) dropped as stale by async_generation_ratio=1 \(made at a "
                          r"step before 1\); last failure", str(caught.value))
        assert found and int(found.group(1)) == started == train.stats()["dropped_stale"], caught.value
    finally:
        server.stop()


def test_turns_regenerated_after_every_abort_until_task_timeout_say_so(tmp_path, schedulers):
    """Weight updates with suspend(abort=True) every second, replies of 3 s, partial_rollout
    off: each aborted turn starts over from scratch and never ends, till task_timeout kills
    the member. The error said only 'task_timeout … 0 turn(s) taken', not that the trainer's
    aborts kept every turn from ending, nor what continues an aborted turn."""
    import threading

    from held_replies import continuing

    server = LLMServer(policy=continuing, token_rate=10).start()  # 31 tokens: 3 s a reply
    stop = threading.Event()
    try:
        train = schedulers(rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=2, task_timeout=4.0,
                                     max_retries=0),
                           EnvManagerConfig(num_env_groups=1, group_size=2, tags=["tiny"],
                                            task_sets=lake_set(tmp_path, name="tiny", desc=TINY, max_steps=2)),
                           max_failed_groups=1)

        def updates():
            version = 0
            while not stop.wait(1.0):
                train.suspend(abort=True)
                version += 1
                train.resume(policy_version=version)

        thread = threading.Thread(target=updates, daemon=True)
        with pytest.raises(RolloutError) as caught:
            thread.start()
            train.get_batch(batch_size=2, step=0, timeout=120)
        said = str(caught.value)
        assert "task_timeout" in said, said
        assert re.search(r"\d+ model request\(s\) were aborted by suspend\(abort=True\)", said), said
        assert "partial_rollout=True" in said, said
    finally:
        stop.set()
        server.stop()
