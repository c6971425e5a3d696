"""The exit statuses of ``parallel-rollout run``: what a cron job or CI step branches on.

=====  ==============================================================================
code   meaning
=====  ==============================================================================
0      finished: every sample has a final record (and every gate passed)
1      aborted: the VM pool is exhausted, its manager process died, the disk is full (once
       the run started: too little free at its start is 2, nothing ran), a guest lacks the
       mode's prerequisite …; or finished with samples never graded (their
       final record an infrastructure failure; no gate applied). Every finished result is
       kept; ``--resume`` continues and runs the never-graded samples once more (not one
       that ended on its task file's own error: ``task_fault`` "task_file")
2      bad usage: a flag, config file or task file is wrong, or a provider's prerequisite
       is missing (bwrap, the docker CLI or daemon, QEMU, a guest image); nothing ran; or the
       model endpoint refused the run's key or does not know its model (401, 403, 404), or a
       VM booted unlike the run's settings (a remote machine's screen size): the run stopped
       there, nothing it answered graded; ``--resume`` once it is fixed
3      finished below ``--fail-under``: the success rate is under the threshold
4      finished with a significant regression against ``--compare-to`` (McNemar exact,
       p < 0.05, or over tasks with groups: report/clustered.py; lower success rate)
5      finished, but ``--compare-to`` (or ``compare --check``) cannot judge: the runs share
       no final sample, the baseline is unfinished or cannot be read (a corrupted line), or
       there is no such run
75     another run holds this run folder's lock (EX_TEMPFAIL: try again later)
130    interrupted by SIGINT, SIGTERM or SIGHUP; ``--resume`` continues
=====  ==============================================================================

When both gates fail, the run exits 3 (the threshold is the harder promise).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_ABORTED = 1
EXIT_USAGE = 2
EXIT_BELOW_THRESHOLD = 3
EXIT_REGRESSION = 4
#: the regression gate has nothing (or only an unfinished baseline) to compare with
EXIT_NO_VERDICT = 5
#: sysexits.h EX_TEMPFAIL: a cron wrapper retries later
EXIT_LOCKED = 75
EXIT_INTERRUPTED = 130
