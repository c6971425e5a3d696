"""What an Env returns is checked against its contract (``envs.base``): a step that is not a
StepResult, an evaluation that is not ``(reward, details)``, a reward that is not a finite
real number fail the attempt as ``error`` with reward 0 and a message naming the env, the
method, what it returned and what it must return; valid envs score as before. The mode is
this module's ``ContractEnv`` (``--mode test_env_contract:ContractEnv``), run through the CLI.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from conftest import assert_exactly_once, write_tasks
from parallel_rollout.cli import main
from parallel_rollout.envs.base import Env, StepResult

#: case -> what ContractEnv.step (``step_*``) or .evaluate returns
RETURNS = {
    "step_dict": {"observation": {}, "done": True},
    "evaluate_none": None,
    "evaluate_reward_only": 1.0,
    "reward_str": ("1", {}),
    "reward_none": (None, {}),
    "reward_nan": (float("nan"), {}),
    "details_none": (1.0, None),
    "reward_bool": (True, {}),
    "reward_one": (1, {}),
    "reward_scale": (7.5, {}),
    "reward_scale_again": (-2.0, {}),
    "reward_own_success": (7.5, {"success": False}),
}
#: case -> the failure message of an attempt the contract fails
ERRORS = {
    "step_dict": "ContractEnv.step returned dict {'done': True, 'observation': {}}; it must return a "
                 "StepResult(observation, done=False, info={})",
    "evaluate_none": "ContractEnv.evaluate returned None; it must return (reward, details)",
    "evaluate_reward_only": "ContractEnv.evaluate returned float 1.0; it must return (reward, details)",
    "reward_str": "ContractEnv.evaluate returned the reward str '1'; it must return (reward, details): "
                  "the reward a finite real number",
    "reward_none": "ContractEnv.evaluate returned the reward None; it must",
    "reward_nan": "ContractEnv.evaluate returned the reward nan, not a finite number; it must",
    "details_none": "ContractEnv.evaluate returned the details None; it must return (reward, details)",
}


class ContractEnv(Env):
    """Returns what ``RETURNS`` holds for the task's ``case``."""

    name = "contract"
    vm_scope = None

    def reset(self, task, vm):
        self.case = task.get("case")
        return {"case": self.case}

    def step(self, action):
        if self.case.startswith("step_"):
            return RETURNS[self.case]
        return StepResult({"case": self.case}, done=True)

    def evaluate(self):
        return RETURNS[self.case] if not self.case.startswith("step_") else (1.0, {})


def test_env_returns_are_checked_and_an_error_scores_zero(tmp_path):
    data = write_tasks(tmp_path / "tasks.jsonl", [{"id": case, "case": case, "answers": ["go"]} for case in RETURNS])
    result = CliRunner().invoke(main, [
        "--mode", "test_env_contract:ContractEnv", "--data", str(data), "--agent", "py_agents:ScriptedAnswerAgent",
        "--num-rollouts", "1", "--output-dir", str(tmp_path / "out"), "--run-id", "contract", "--no-progress"])
    assert result.exit_code == 0, (result.output, result.exception)
    run_dir = tmp_path / "out" / "contract"
    finals = assert_exactly_once(run_dir, {f"{case}#0" for case in RETURNS})
    for case, message in ERRORS.items():
        record = finals[f"{case}#0"]
        assert (record["status"], record["reward"], record["success"]) == ("error", 0.0, False), record
        assert record["failure"]["type"] == "EnvContractError", record["failure"]
        assert record["failure"]["message"].startswith(message), record["failure"]["message"]
    scored = {case: (finals[f"{case}#0"]["status"], finals[f"{case}#0"]["reward"])
              for case in RETURNS if case not in ERRORS}
    assert scored == {"reward_bool": ("success", 1.0), "reward_one": ("success", 1.0),
                      "reward_scale": ("success", 7.5), "reward_scale_again": ("failure", -2.0),
                      "reward_own_success": ("failure", 7.5)}, scored
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status_counts"]["error"] == len(ERRORS), summary["status_counts"]
    assert summary["mean_reward"] == round((1 + 1 + 7.5 - 2 + 7.5) / len(RETURNS), 4), summary
    # a reward outside [0, 1] without details["success"]: said once (one worker), not silently
    warnings = [line for line in _lines(run_dir / "run.log") if "outside [0, 1]" in line]
    assert len(warnings) == 1 and "ContractEnv.evaluate returned the reward" in warnings[0], warnings


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


class NoVMByMethodEnv(ContractEnv):
    """Says it needs no VM through the public needs_vm(), but leaves vm_scope at its default."""

    vm_scope = Env.vm_scope

    @classmethod
    def needs_vm(cls) -> bool:
        return False


class TypoScopeEnv(ContractEnv):
    """A vm_scope that is none of None, "episode", "call"."""

    vm_scope = "episodes"


def test_needs_vm_and_vm_scope_that_disagree_are_refused_naming_the_class(tmp_path):
    """needs_vm() decided whether the runner started a pool, vm_scope whether the worker leased
    one: False against "episode" failed every sample on a lease from no pool. They must agree,
    and the mode is refused (exit 2, nothing run) when they do not; so is a vm_scope typo."""
    data = write_tasks(tmp_path / "tasks.jsonl", [{"id": "a", "case": "reward_one", "answers": ["go"]}])
    for env, says in (("NoVMByMethodEnv", "NoVMByMethodEnv.needs_vm() says False but its vm_scope is 'episode'"),
                      ("TypoScopeEnv", "TypoScopeEnv.vm_scope is 'episodes'")):
        result = CliRunner().invoke(main, [
            "--mode", f"test_env_contract:{env}", "--data", str(data), "--agent", "py_agents:ScriptedAnswerAgent",
            "--num-rollouts", "1", "--output-dir", str(tmp_path / "out"), "--run-id", env, "--no-progress"])
        assert result.exit_code == 2, (result.output, result.exception)
        assert says in " ".join(result.output.split()), result.output
        assert not (tmp_path / "out" / env).exists()
