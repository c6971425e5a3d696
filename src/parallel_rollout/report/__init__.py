"""What a run leaves for people and CI to read: the HTML report, comparisons of two runs,
JUnit XML, the list of runs, and the gates a nightly job exits on.

Every module here reads a run folder back (``run_data``) and writes files next to it; none
of them changes what a run computes.
"""
