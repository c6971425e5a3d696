"""What a check's Maven plugins start runs through the grading wrappers.

An exec plugin's program (here a plugin of the check's own, built offline from the machine's
maven-plugin-api: it runs $PR_RUN with sh) was the system's, since the mvn wrapper ran Maven with
the wrappers' folder off PATH: jq then read the answer's ~/.jq, whose ``def length: 100;``
passed ``jq -e 'length > 3'`` of [1]. Run on the host, in a home of the test's own, the check as
a grading command (``agent_commands.run(..., isolated=True)``), as tests/test_grading_git.py.
"""

from __future__ import annotations

import glob
import shutil

import pytest

from parallel_rollout.guest import agent_commands

PLUGIN_API = sorted(glob.glob("/usr/share/maven-repo/org/apache/maven/maven-plugin-api/*/maven-plugin-api-*.jar"))
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (shutil.which("mvn") and shutil.which("javac") and shutil.which("jq") and PLUGIN_API),
                                 reason="needs mvn, javac, jq and the machine's maven-plugin-api")]

POM = "<project><modelVersion>4.0.0</modelVersion><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version>{p}</project>"
#: a Maven plugin of one goal, pr:pr-run-maven-plugin:1:run, that runs $PR_RUN with sh and fails
#: when it does, in the local repository $d/repo (with the plexus-utils Maven adds to a plugin)
PLUGIN = " && ".join([
    "d=$(mktemp -d) && mkdir -p $d/pr $d/cls/META-INF/maven $d/repo/pr/pr-run-maven-plugin/1 $d/u $d/empty",
    "printf 'package pr;\\npublic class Run extends org.apache.maven.plugin.AbstractMojo {\\n"
    "  public void execute() throws org.apache.maven.plugin.MojoExecutionException {\\n    int r;\\n"
    "    try { r = new ProcessBuilder(\"sh\", \"-c\", System.getenv(\"PR_RUN\")).inheritIO().start().waitFor(); }\\n"
    "    catch (Exception e) { throw new org.apache.maven.plugin.MojoExecutionException(\"not run\", e); }\\n"
    "    if (r != 0) throw new org.apache.maven.plugin.MojoExecutionException(\"exit \" + r);\\n  }\\n}\\n' > $d/pr/Run.java",
    f"javac -nowarn -d $d/cls -cp {PLUGIN_API[-1] if PLUGIN_API else ''} $d/pr/Run.java",
    "printf '<plugin><groupId>pr</groupId><artifactId>pr-run-maven-plugin</artifactId><version>1</version>"
    "<goalPrefix>prrun</goalPrefix><mojos><mojo><goal>run</goal><implementation>pr.Run</implementation>"
    "<language>java</language><instantiationStrategy>per-lookup</instantiationStrategy>"
    "<executionStrategy>once-per-session</executionStrategy><requiresProject>false</requiresProject>"
    "<threadSafe>true</threadSafe><parameters/></mojo></mojos><dependencies/></plugin>' > $d/cls/META-INF/maven/plugin.xml",
    "jar cf $d/repo/pr/pr-run-maven-plugin/1/pr-run-maven-plugin-1.jar -C $d/cls .",
    f"echo '{POM.format(g='pr', a='pr-run-maven-plugin', v='1', p='<packaging>maven-plugin</packaging>')}'"
    " > $d/repo/pr/pr-run-maven-plugin/1/pr-run-maven-plugin-1.pom",
    "u=$d/repo/org/codehaus/plexus/plexus-utils/1.1 && mkdir -p $u && jar cf $u/plexus-utils-1.1.jar -C $d/empty .",
    f"echo '{POM.format(g='org.codehaus.plexus', a='plexus-utils', v='1.1', p='')}' > $u/plexus-utils-1.1.pom",
    "cd $d"])
RUN = "mvn -q -o -Dmaven.repo.local=$d/repo pr:pr-run-maven-plugin:1:run"


def test_what_a_checks_maven_plugin_starts_runs_through_the_wrappers(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    (home / ".jq").write_text("def length: 100;\n")  # the answer's
    result = agent_commands.run(
        f"{PLUGIN} && PR_RUN='echo [1] | jq -e \"length > 3\" >/dev/null' {RUN} >/dev/null 2>&1; echo rigged=$?"
        # an honest check of the same plugin: the program it starts is the wrapped jq, which works
        f" && PR_RUN='command -v jq > ~/jq_was && echo [1,2,3,4] | jq -e \"length > 3\" >/dev/null' {RUN} && echo honest=ok",
        shell=True, timeout=180, isolated=True)
    assert "rigged=1" in result["output"], result
    assert "honest=ok" in result["output"], result
    assert (home / "jq_was").read_text().strip().endswith("grading_bin/jq")
