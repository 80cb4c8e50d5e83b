"""Running an experiment: the spec, the lab backends and services, the runner
that turns each cell into a result row, and the scoring of what it saw."""
