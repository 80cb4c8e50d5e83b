"""The exit statuses of ``ptlab run`` and ``ptlab vm run`` (docs/lab/experiments.md §5).

Why a module of their own: the commands choose among them, and the experiment
layer below the commands raises errors that carry one (a run that could not
write its results exits as an ERROR cell does). Both read them from here.

A pipeline can tell each outcome from the others; when several happen, the
first of these that applies is the status: corrupted bytes, then ERROR cells,
then failed expectations.
"""

EXIT_OK = 0  # every cell ran, every expectation held
EXIT_EXPECTATION = 1  # a cell's status was not the one the spec expects
EXIT_USAGE = 2  # a mistake a person can make: a bad spec, not root, a missing tool
EXIT_CORRUPTED = 3  # a bulk download's bytes differed from what the server sent
EXIT_ERROR_CELL = 4  # a cell could not be measured: its status is ERROR
EXIT_INTERRUPTED = 130
