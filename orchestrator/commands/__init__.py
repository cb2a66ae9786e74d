"""The commands of `mooring`, each a module exposing `configure(parser)` and `main(args) -> int` (orchestrator/cli.py
routes to them); some are pipelines that are also commands."""

# name → (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("orchestrator.commands.run", "run one federated experiment from a YAML config"),
    "compare": ("pipelines.compare", "compare algorithms (and seeds) on one config and the same partition"),
    "sweep": ("pipelines.sweep_cli", "search hyperparameters with Optuna, trials on Ray"),
    "submit": ("orchestrator.commands.submit", "submit run/compare/sweep to a Ray cluster as a job"),
    "jobs": ("orchestrator.commands.jobs", "list, inspect, follow or stop submitted jobs"),
    "bench": ("orchestrator.commands.bench", "run the performance benchmarks"),
    "claims": ("pipelines.claims", "check the papers' claims on real digits and write docs/claims.md"),
    "table": ("pipelines.tables", "a paper's results tables, every cell run, beside its numbers: docs/tables/"),
    "config": ("orchestrator.commands.config", "show the resolved config"),
    "data": ("orchestrator.commands.data", "show each client's class histogram"),
    "ui": ("orchestrator.commands.ui", "open the MLflow UI on the run store"),
    "new": ("orchestrator.commands.new", "write a new method file and its test, to fill in"),
}
