"""An agent that calls the model more than once a turn (client_agents:PlanActAgent: a "plan"
call, then an "act" call that sees the plan): every call's sampled tokens are in the turn's
record (``earlier_calls``) and in segments() with loss_mask 1, in the context the server
sampled them in, through a RolloutScheduler on the real engine and the test model
(token_model.TokenModel), chat and token-in; a call whose prompt is not the sequence so far
extended is a segment break counted in drift; a turn that calls no model records none; a cut
keeps the calls answered before it."""

from __future__ import annotations

import pytest

from llm_server import LLMServer
from parallel_rollout.agents import ContextOverflow, ModelClient
from parallel_rollout.agents.calls import calls_of
from parallel_rollout.config import RunConfig
from parallel_rollout.rl import EnvManagerConfig
from rl_support import lake_set, rl_config
from token_model import TokenModel, write_tokenizer

PLAN = "<think>go right</think>"
ACT = "<answer>Right</answer>"


def plan_then_act(call: int) -> str:
    """The test model's reply to the conversation's ``call``-th model call: odd ones are plans
    (a <think> block only, which the template drops once a message follows), even ones moves."""
    return PLAN if call % 2 else ACT


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return write_tokenizer(tmp_path_factory.mktemp("tokenizer"))


def _lake_batch(tmp_path, schedulers, agent, policy, **config):
    """A batch of two trajectories of ``client_agents:<agent>`` on a 1x4 lake (three moves
    right), the test server answering by ``policy``; the batch and the server."""
    server = LLMServer(policy=policy).start()
    try:
        train = schedulers(rl_config(tmp_path, server, agent=f"client_agents:{agent}", num_rollouts=1,
                                     envs_per_worker=2, **config),
                           EnvManagerConfig(group_size=2, tags=["line"],
                                            task_sets=lake_set(tmp_path, name="line", desc=["SFFG"], max_steps=10)))
        return train.get_batch(batch_size=2, step=0, timeout=120), server
    finally:
        server.stop()


def _batch(tmp_path, schedulers, tokenizer_dir, **config):
    model = TokenModel(tokenizer_dir, plan_then_act)
    batch, server = _lake_batch(tmp_path, schedulers, "PlanActAgent", model, **config)
    return batch, model, server


def _calls(turn):
    return calls_of(turn)  # its earlier calls, its own, the calls that outlived its act


@pytest.mark.parametrize("tokens", [False, True], ids=["chat", "tokenizer"])
def test_every_call_of_a_turn_is_recorded_and_trained_on(tmp_path, schedulers, tokenizer_dir, tokens):
    config = dict(tokenizer=str(tokenizer_dir), max_model_len=4000) if tokens else {}
    batch, model, server = _batch(tmp_path, schedulers, tokenizer_dir, **config)
    plan_ids, act_ids = model.encode(PLAN) + [model.end_id], model.encode(ACT) + [model.end_id]
    for trajectory in batch:
        assert trajectory.status == "success" and len(trajectory.turns) == 3, trajectory.record
        for turn in trajectory.turns:
            (plan,) = turn["earlier_calls"]  # the plan call, its own record
            assert plan["token_ids"] == plan_ids and turn["token_ids"] == act_ids
            assert plan["reply"] == PLAN and turn["reply"] == ACT
            assert plan["stop_reason"] == turn["stop_reason"] == "stop"
            assert plan["logprobs"] == [-0.01 * (k + 1) for k in range(len(plan_ids))]
            assert plan["policy_version"] == turn["policy_version"] == 0
            assert plan["prompt_token_ids"] in model.prompts and turn["prompt_token_ids"] in model.prompts
        segments = trajectory.segments()
        # every id the server sampled, plan and act, once, in order, with loss_mask 1 ...
        masked = [i for s in segments for i, m in zip(s.input_ids, s.loss_mask) if m]
        assert masked == (plan_ids + act_ids) * 3
        logprobs = [lp for s in segments for lp, m in zip(s.logprobs, s.loss_mask) if m]
        assert logprobs == [lp for turn in trajectory.turns for call in _calls(turn) for lp in call["logprobs"]]
        # ... each in the sequence the server saw when it sampled it
        for turn in trajectory.turns:
            for call in _calls(turn):
                assert any(s.input_ids[: len(call["prompt_token_ids"]) + len(call["token_ids"])]
                           == call["prompt_token_ids"] + call["token_ids"] for s in segments)
        if tokens:  # the token history holds the plan's sampled ids: one exact sequence
            assert trajectory.drift == 0 and [s.turns for s in segments] == [[0, 1, 2]]
        else:  # the server re-renders the plan without its <think> block for the act call: a break
            assert trajectory.drift == 3 and [s.turns for s in segments] == [[0], [0, 1], [1, 2], [2]]
    assert len(server.requests) == 2 * 3 * 2  # two calls a turn, three turns, two trajectories


@pytest.mark.parametrize("agent", ["PlanOnceAgent", "PlanInResetAgent"])
def test_a_turn_that_calls_no_model_records_no_model_exchange(tmp_path, schedulers, tokenizer_dir, agent):
    """client_agents:PlanOnceAgent asks for its three moves on the first turn and plays them:
    turns 2 and 3 record no model call (not turn 1's again, whose sampled ids segments()
    would have trained on three times). PlanInResetAgent asks in reset(), before turn 1:
    its call is turn 1's (it was cleared before turn 1, its sampled ids in no segment)."""
    model = TokenModel(tokenizer_dir, lambda call: "<answer>Right,Right,Right</answer>")
    batch, server = _lake_batch(tmp_path, schedulers, agent, model)
    sampled = model.encode("<answer>Right,Right,Right</answer>") + [model.end_id]
    for trajectory in batch:
        assert trajectory.status == "success" and len(trajectory.turns) == 3, trajectory.record
        first, *rest = trajectory.turns
        assert first["token_ids"] == sampled
        assert all(not {"reply", "stop_reason", "token_ids", "prompt_token_ids"} & turn.keys() for turn in rest)
        (segment,) = trajectory.segments()
        assert segment.turns == [0] and [i for i, m in zip(segment.input_ids, segment.loss_mask) if m] == sampled
    assert len(server.requests) == 2


def test_a_cut_keeps_the_calls_answered_before_it(tmp_path, tokenizer_dir):
    """The act call's prompt reaches max_model_len: the episode ends as context_overflow, and
    the turn the worker writes is the plan call, whose tokens were sampled."""
    model = TokenModel(tokenizer_dir, plan_then_act)
    server = LLMServer(policy=model).start()

    def client(**config):
        made = ModelClient(RunConfig(mode="gym", agent="openai", base_url=server.url, model="m",
                                     tokenizer=str(tokenizer_dir), **config))
        made.start()
        return made

    try:
        messages = [{"role": "user", "content": "SFFG"}]
        plan = client().chat(messages)  # how long the plan's prompt and reply are
        budget = len(plan.prompt_token_ids) + len(plan.token_ids) + 2  # the plan fits, the act call does not
        bounded = client(max_model_len=budget)
        assert bounded.chat(messages).token_ids == plan.token_ids
        messages += [{"role": "assistant", "content": plan.text}, {"role": "user", "content": "Now move."}]
        with pytest.raises(ContextOverflow) as cut:
            bounded.chat(messages)
    finally:
        server.stop()
    assert cut.value.turn["token_ids"] == plan.token_ids and cut.value.turn["reply"] == PLAN
    assert cut.value.turn["prompt_token_ids"] == plan.prompt_token_ids and "earlier_calls" not in cut.value.turn


def test_calls_of_one_client_at_once_take_turns_and_each_is_recorded(tmp_path, tokenizer_dir):
    """An async agent's act that gathers two calls (asyncio.gather of two agenerate/achat:
    two candidates a turn): both ran at once in the client's one turn record, each wrote
    its reply into the other's, and one call's sampled ids were lost or filed under the
    other's prompt. Calls of one client take turns: each is in the turn, with its own prompt."""
    import asyncio
    import time

    model = TokenModel(tokenizer_dir, lambda call: ACT if call % 2 else PLAN)
    server = LLMServer(policy=lambda body: (time.sleep(0.3), model(body))[1]).start()  # both under way at once
    try:
        client = ModelClient(RunConfig(mode="gym", agent="openai", base_url=server.url, model="m"))
        client.start()
        first = model.encode("<|im_start|>assistant\n")  # the model's reply follows the markers it counts
        prompts = [first, first + model.encode("x") + first]

        async def act():
            return await asyncio.gather(*(client.agenerate(prompt) for prompt in prompts))

        replies = asyncio.run(act())
        turn = client.turn_record()
    finally:
        server.stop()
    assert [r.text for r in replies] == [ACT, PLAN]
    assert [r.prompt_token_ids for r in replies] == prompts
    calls = sorted(_calls(turn), key=lambda call: len(call["prompt_token_ids"]))  # in the order they ran
    assert len(calls) == 2, turn
    for call, prompt, reply in zip(calls, prompts, (ACT, PLAN)):
        assert call["prompt_token_ids"] == prompt and call["token_ids"] == model.encode(reply) + [model.end_id]
    assert client.usage()["requests"] == 2


def test_a_call_of_the_last_attempt_still_under_way_stays_out_of_the_next(tmp_path, tokenizer_dir):
    """A gathered call that outlived its act (the other raised, so the act ended with this
    one still under way or waiting for its turn): the next attempt's start() waited for
    nothing, and the stray reply was written into the new attempt's turn, an earlier call of
    its first turn. start() lets it end first; a call still waiting for its turn is not sent."""
    import threading
    import time

    from parallel_rollout.errors import AttemptCancelled

    model = TokenModel(tokenizer_dir, lambda call: ACT)
    server = LLMServer(policy=lambda body: (time.sleep(0.5), model(body))[1]).start()
    try:
        client = ModelClient(RunConfig(mode="gym", agent="openai", base_url=server.url, model="m"))
        client.start()
        old, new = model.encode("<|im_start|>assistant\n"), model.encode("x<|im_start|>assistant\n")
        outcomes: list = []

        def stray():
            try:
                outcomes.append(client.generate(old).prompt_token_ids)
            except AttemptCancelled as exc:
                outcomes.append(exc)

        strays = [threading.Thread(target=stray) for _ in range(2)]  # one under way, one waiting its turn
        for thread in strays:
            thread.start()
        while not server.requests:
            time.sleep(0.01)
        client.start()  # the next attempt
        reply = client.generate(new)
        turn = client.turn_record()
        for thread in strays:
            thread.join(10)
    finally:
        server.stop()
    assert reply.prompt_token_ids == new and len(_calls(turn)) == 1 and turn["prompt_token_ids"] == new, turn
    assert client.usage()["requests"] == 1
    # the strays were sent in the old attempt, or not at all (the one waiting, when start() came first)
    assert len(outcomes) == 2 and all(o == old or isinstance(o, AttemptCancelled) for o in outcomes), outcomes


@pytest.mark.parametrize("agent", ["FirstAnswerAgent", "BackgroundCallAgent"])
def test_a_call_that_outlives_its_act_is_recorded_under_its_turn(tmp_path, schedulers, tokenizer_dir, agent):
    """An async agent's act returns with one of its model calls still under way (the loser of
    an asyncio.wait(FIRST_COMPLETED) race; a call fired as a background task): the turn's
    record held that call's prompt without its reply, and the reply's sampled ids landed in
    the next turn's record, an earlier call under the next turn's order. The worker's
    turn_record() waits for the turn's calls: each turn holds both of its calls, each with its
    own prompt and sampled ids, the late one marked ``outlived_act``. The turn's own fields
    are the call the move came from (the agent's ``moved_by``), not the late one, which ended
    last: that one is in ``outlived_calls``, after it, in the order the calls ran."""
    import time

    model = TokenModel(tokenizer_dir, lambda call: ACT)
    # the "b" call answers late: it is still under way when act has its "a" answer
    batch, server = _lake_batch(tmp_path, schedulers, agent, lambda body: (
        time.sleep(0.5 if body["messages"][-1]["content"].endswith(" b") else 0), model(body))[1])
    sampled = model.encode(ACT) + [model.end_id]
    for trajectory in batch:
        assert trajectory.status == "success" and len(trajectory.turns) == 3, trajectory.record
        for number, turn in enumerate(trajectory.turns, 1):
            calls = _calls(turn)
            names = [call["request"][-1]["content"].rsplit("\n", 1)[-1] for call in calls]
            assert sorted(names) == [f"turn {number} a", f"turn {number} b"], (number, turn)
            for call in calls:
                assert call["reply"] == ACT and call["token_ids"] == sampled and call["stop_reason"] == "stop"
                assert call["prompt_token_ids"] in model.prompts
            # in the order they ran: the one act's move came from, then the one still under way
            assert [call.get("outlived_act", False) for call in calls] == [False, True], turn
            # the turn's own sample is the move's call; the late one is kept apart, not earlier
            assert turn["moved_by"] in ("a", "b") and names[0] == f"turn {number} {turn['moved_by']}", turn
            assert turn["request"][-1]["content"].endswith(names[0]) and not turn.get("outlived_act"), turn
            assert "earlier_calls" not in turn and [c["request"] for c in turn["outlived_calls"]] == [
                calls[1]["request"]], turn
        masked = [i for s in trajectory.segments() for i, m in zip(s.input_ids, s.loss_mask) if m]
        assert masked == sampled * 6  # every call's sampled ids, each once
    assert len(server.requests) == 2 * 3 * 2


def test_a_turn_whose_every_call_outlived_its_act_has_no_own_sample(tmp_path, schedulers, tokenizer_dir):
    """An async agent fires its call as a background task and moves without it: the act
    returns before any of its calls ended. The call that ended last was the turn's own
    sample, as if the move came from it; now the turn has no own call fields, and the call
    is in ``outlived_calls``, marked, its sampled ids trained on once."""
    import time

    model = TokenModel(tokenizer_dir, lambda call: ACT)
    batch, server = _lake_batch(tmp_path, schedulers, "BackgroundOnlyAgent",
                                lambda body: (time.sleep(0.3), model(body))[1])
    sampled = model.encode(ACT) + [model.end_id]
    for trajectory in batch:
        assert trajectory.status == "success" and len(trajectory.turns) == 3, trajectory.record
        for number, turn in enumerate(trajectory.turns, 1):
            assert not {"request", "reply", "stop_reason", "token_ids", "prompt_token_ids"} & turn.keys(), turn
            assert "earlier_calls" not in turn and turn["moved_by"] is None, turn
            (late,) = turn["outlived_calls"]
            assert late["request"][-1]["content"].endswith(f"turn {number} b") and late["outlived_act"] is True
            assert late["reply"] == ACT and late["token_ids"] == sampled and late["prompt_token_ids"] in model.prompts
        masked = [i for s in trajectory.segments() for i, m in zip(s.input_ids, s.loss_mask) if m]
        assert masked == sampled * 3
    assert len(server.requests) == 2 * 3


def test_a_call_that_outlives_a_cut_act_is_in_the_cut_turn(tmp_path, schedulers, tokenizer_dir):
    """One of an act's gathered calls is cut at the token limit (on_length="end") while the
    other waits for its turn: the act raises LengthCut and the episode ends truncated. The
    cut turn the worker writes held only the calls answered before the cut: the other call
    was still sent and sampled, and its ids were in no record. The worker waits for the
    turn's calls: the cut turn holds it too, marked ``outlived_act``, in ``outlived_calls``
    (it ran after the cut call, the turn's own)."""
    import time

    model = TokenModel(tokenizer_dir, lambda call: ACT)

    def policy(body):
        if body["messages"][-1]["content"].endswith(" b"):  # cut after two tokens, answered late
            time.sleep(0.5)
            return model({**body, "max_tokens": 2})
        return model(body)

    batch, server = _lake_batch(tmp_path, schedulers, "CutRaceAgent", policy, on_length="end")
    sampled = model.encode(ACT) + [model.end_id]
    for trajectory in batch:
        assert trajectory.status == "truncated" and len(trajectory.turns) == 1, trajectory.record
        (turn,) = trajectory.turns
        # the cut "b" call, the turn's own fields ...
        assert turn["request"][-1]["content"].endswith("turn 1 b") and turn["stop_reason"] == "length", turn
        assert turn["token_ids"] == sampled[:2] and "earlier_calls" not in turn and not turn.get("outlived_act")
        (answered,) = turn["outlived_calls"]  # ... then the "a" call, which ran after it
        assert answered["request"][-1]["content"].endswith("turn 1 a"), turn
        assert answered["reply"] == ACT and answered["token_ids"] == sampled and answered.get("outlived_act")
        masked = [i for s in trajectory.segments() for i, m in zip(s.input_ids, s.loss_mask) if m]
        assert sorted(masked) == sorted(sampled + sampled[:2])  # every sampled id, each once
    assert len(server.requests) == 2 * 2


def test_a_call_that_outlives_a_failed_act_is_in_the_failed_attempts_record(tmp_path, schedulers, tokenizer_dir):
    """An async agent's act raises its own error (no cut) with a model call it fired still
    under way: that call was sent and sampled, yet it ended only before the next attempt,
    in no record, its tokens in no usage. The failed attempt's trajectory now ends with the
    act's turn, both calls in it, the late one marked ``outlived_act``; the record counts it
    (``outlived_act``, and usage counts its tokens) and so does the scheduler's stats()."""
    import time

    model = TokenModel(tokenizer_dir, lambda call: ACT)
    server = LLMServer(policy=lambda body: (
        time.sleep(0.5 if body["messages"][-1]["content"].endswith(" b") else 0), model(body))[1]).start()
    try:
        train = schedulers(rl_config(tmp_path, server, agent="client_agents:FailingRaceAgent", num_rollouts=1,
                                     envs_per_worker=1),
                           EnvManagerConfig(group_size=1, tags=["line"],
                                            task_sets=lake_set(tmp_path, name="line", desc=["SFFG"], max_steps=10)))
        (failed,) = train.get_batch(-1, step=0, timeout=120)
        stats = train.stats()
    finally:
        server.stop()
    sampled = model.encode(ACT) + [model.end_id]
    assert failed.status == "error" and "the agent's own bug" in str(failed.record["failure"]), failed.record
    (turn,) = failed.turns
    calls = _calls(turn)
    assert [call["request"][-1]["content"].rsplit("\n", 1)[-1] for call in calls] == ["turn 1 a", "turn 1 b"], turn
    assert all(call["reply"] == ACT and call["token_ids"] == sampled for call in calls), turn
    assert [call.get("outlived_act", False) for call in calls] == [False, True], turn
    assert failed.record["outlived_act"] == 1
    assert failed.record["usage"]["requests"] == 2 and failed.record["usage"]["completion_tokens"] == 2 * len(sampled)
    assert stats["calls_outlived_failed_act"] == 1, stats
    assert len(server.requests) == 2
