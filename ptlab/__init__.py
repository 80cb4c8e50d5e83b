"""ptlab: the application. CLI, experiment specs, runner, lab services, workloads, reports."""

__version__ = "0.1.0"
