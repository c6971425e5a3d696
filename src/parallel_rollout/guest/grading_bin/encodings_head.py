

# ---- the grading front's head, put before the first import of the guest python's own
# encodings/__init__.py (../../pool/providers/python_front.py; ./encodings_front.py is its end). Under
# -X frozen_modules=off python reads its startup modules (codecs, which this module imports first;
# os, io, site …) from their sources, and their bytecode from the folder of a check's
# PYTHONPYCACHEPREFIX or -X pycache_prefix: the answer's pycs there (/tmp/pyc, dated and sized as
# their sources) ran before the end could keep to ./graded_imports.py's rules (its os._exit(0) passed
# the check). A grading command's python reads them from the stdlib's own bytecode instead, its
# cache folder set aside until the end has laid those rules. Any other python: one attribute read.
def _parallel_rollout_cache_set_aside():
    import sys
    if sys.pycache_prefix is None:
        return None
    import posix
    if not posix.environ.get(b"PARALLEL_ROLLOUT_GRADING_SINCE"):
        try:
            posix.stat("/run/guest/grading")  # there only while a grading command runs
        except OSError:
            return None
    prefix, sys.pycache_prefix = sys.pycache_prefix, None
    return prefix


_parallel_rollout_prefix = _parallel_rollout_cache_set_aside()
del _parallel_rollout_cache_set_aside
# ---- the module's own source

