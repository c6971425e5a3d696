"""What a mode knows of its guest before a VM boots (``Env.check_guest``), asked one way
(``envs.base.guest_check``) by the run's start, --dry-run and an RL scheduler: a mode of
one's own that checks its guest is asked with the provider's name; one that checks nothing
is never asked, nor is its provider looked up twice."""

from __future__ import annotations

from click.testing import CliRunner

from conftest import shell_task, write_tasks
from parallel_rollout.cli import main
from parallel_rollout.envs.shell import ShellEnv
from parallel_rollout.errors import ProviderUnavailable


class ToolEnv(ShellEnv):
    """A shell mode of one's own whose guest needs a tool this host must have (as the process
    provider's sandboxes see the host's /usr): refused before a boot when ``MISSING`` says so."""

    name = "tool-shell"
    asked: list[str] = []
    missing = False

    @staticmethod
    def check_guest(provider_name: str) -> str | None:
        """The tool, on the provider's guest."""
        ToolEnv.asked.append(provider_name)
        if ToolEnv.missing:
            raise ProviderUnavailable(f"the tool-shell mode needs its tool on the {provider_name} provider's guest")
        return f"the tool for the tool-shell mode on {provider_name}"


def cli(tmp_path, *args: str):
    """``run`` of one task without a mode of its own, the folder ``t``."""
    data = write_tasks(tmp_path / "tasks.jsonl", [{k: v for k, v in shell_task("a").items() if k != "mode"}])
    return CliRunner().invoke(main, ["run", "--data", str(data), "--output-dir", str(tmp_path / "out"), "--run-id",
                                     "t", "--no-progress", *args])


def test_a_mode_of_ones_own_that_checks_its_guest_is_asked_before_a_boot(tmp_path, monkeypatch):
    """A guard (this held already): --dry-run says its note, and the run's start refuses a guest
    without what it needs, exit 2, before the run's folder opens."""
    monkeypatch.setattr(ToolEnv, "asked", [])
    dry = cli(tmp_path, "--mode", "test_guest_check:ToolEnv", "--agent", "oracle", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "guest: the tool for the tool-shell mode on process" in " ".join(dry.output.split()), dry.output
    monkeypatch.setattr(ToolEnv, "missing", True)
    real = cli(tmp_path, "--mode", "test_guest_check:ToolEnv", "--agent", "oracle")
    assert real.exit_code == 2 and "needs its tool on the process provider's guest" in real.output, real.output
    assert set(ToolEnv.asked) == {"process"} and not (tmp_path / "out" / "t").exists()


def test_a_mode_that_checks_no_guest_looks_no_provider_up_for_it(tmp_path):
    """A guard (this held already): the shell mode knows nothing of its guest before a boot;
    an unknown provider is one problem of --dry-run, the provider's, not a guest's too."""
    dry = cli(tmp_path, "--mode", "shell", "--provider-name", "nosuch", "--dry-run")
    said = " ".join(dry.output.split())
    assert dry.exit_code == 2 and "preflight found 1 problem(s)" in said, said
    assert "provider: unknown provider 'nosuch'" in said and "guest:" not in said, said
