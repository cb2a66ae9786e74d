"""`mooring compare`: several algorithms (or any named variants) × seeds on one base config.

Every variant of a seed runs on exactly the same partition (the partition depends only on the data spec
and the seed). Runs go to Ray as tasks, as many at a time as the CPUs hold, each with its own coordinator
and client actors, each an MLflow run nested under one parent run. The table (CSV and Parquet), every
history (JSON), a PNG of accuracy by round, a shareable report.html and the same report as report.md are saved
and logged to the parent run.
A run that fails (a method's bug, a non-finite loss) is a row marked failed with its reason, the others go on,
and the comparison exits non-zero.
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.arguments import (
    add_address_arg,
    add_config_args,
    add_outside_code_arg,
    apply_outside_code,
)
from pipelines.comparison import (
    Comparison,
    Job,
    Stopped,
    absolute_paths,
    default_columns,
    format_table,
    summary_table,
)
from pipelines.parallel_runs import default_parallel

if TYPE_CHECKING:
    from orchestrator.driver.signals import StopSignals


# ------------------------------------------------------------------------------------------- running
def plan_jobs(base, variants: dict[str, dict[str, Any]], seeds: list[int], actors_per_run: int,
              given: dict[str, Any] | None = None) -> list[Job]:
    """Every (variant, seed) run's config, each checked (orchestrator/driver/preflight.py) before any runs: a ConfigError
    with one line per variant refused. Each run is named in MLflow by its variant, seed and what `given` (the
    command's overrides of the base) and the variant override."""
    from orchestrator.driver.preflight import check_runnable, refusal
    from orchestrator.experiment.config import ConfigError, with_overrides
    from orchestrator.reporting.run_names import run_name
    from pipelines.comparison import own_settings

    base, configs, problems = absolute_paths(base), {}, []
    for name, overrides in variants.items():
        try:
            configs[name] = with_overrides(base, {**overrides, "resources.num_actors": actors_per_run})
            check_runnable(configs[name])
        except ConfigError as e:
            problems.append(f"variant {name}: {str(e).removeprefix('config: ')}")
    if problems:
        raise refusal(problems)
    return [Job(name, seed, with_overrides(cfg, {"seed": seed}),
                run_name=run_name(base.name, name, seed, {**(given or {}), **own_settings(variants[name], name)}))
            for seed in seeds for name, cfg in configs.items()]


def _run_job(cfg, parent_run_id, run_dir, run_name):
    from orchestrator.driver.run import run_experiment

    return run_experiment(cfg, progress=False, parent_run_id=parent_run_id, run_dir=run_dir, run_name=run_name)


# seconds the runs in flight get, after a stop signal, to end their MLflow runs KILLED before they are killed
STOP_GRACE_SECONDS = 30.0


def run_jobs(jobs: list[Job], parallel: int, parent_run_id: str | None, echo=print,
             progress: bool = True) -> Comparison:
    """Run the jobs as Ray tasks, at most `parallel` at once; results in job order whatever finishes first.
    SIGINT or SIGTERM stops it: no run is started after it, the runs in flight are stopped (see stop_runs),
    and the Comparison holds the runs that finished, with `stopped` saying what did not."""
    from orchestrator.driver.signals import StopSignals
    from orchestrator.reporting.progress import Progress
    from orchestrator.reporting.results import summary_metrics

    results: dict[tuple[str, int], Any] = {}
    shown = Progress(len(jobs), "runs", enabled=progress)
    with StopSignals() as stop:
        stop.in_rounds = True  # a signal is recorded, and the loop stops; a second one interrupts at once
        try:
            pending = _run_until_stopped(jobs, parallel, parent_run_id, results, shown, stop,
                                         shown.write if progress else echo)
        finally:
            shown.close()
        if stop.signum is not None:
            stop_runs(pending, results)
    out = Comparison(parent_run_id=parent_run_id)
    for job in jobs:
        r = results.get((job.variant, job.seed))
        if r is None:
            continue
        target = job.cfg.participation.target_accuracy
        if isinstance(r, RunFailed):
            out.rows.append({"variant": job.variant, "algorithm": job.cfg.algorithm.name, "seed": job.seed,
                             **summary_metrics([], target), "rounds": None, "wall_seconds": None,
                             "mlflow_run_id": None, "run_dir": job.run_dir, "failed": r.reason})
            continue
        out.histories.setdefault(job.variant, {})[job.seed] = r.history
        out.rows.append({"variant": job.variant, "algorithm": r.algorithm, "seed": job.seed,
                         **summary_metrics(r.history, target), "rounds": r.rounds, "wall_seconds": r.wall_seconds,
                         "mlflow_run_id": r.mlflow_run_id, "run_dir": r.run_dir, "failed": None})
    if stop.signum is not None:
        out.stopped = Stopped(stop.signum, [j for j in jobs if (j.variant, j.seed) not in results])
    return out


def _run_until_stopped(jobs: list[Job], parallel: int, parent_run_id: str | None, results: dict, shown,
                       stop: StopSignals, write) -> dict[Any, Job]:
    """The submit-and-collect loop; returns the runs still in flight (none unless a stop signal came)."""
    import ray

    from orchestrator.driver.run_dir import new_run_dir

    # max_calls=1: each run in a fresh worker process, so that what one run leaves in memory ends with it (a
    # worker reused for a table's runs grew past 8 GB and was killed by Ray's memory monitor)
    remote = ray.remote(num_cpus=0, max_retries=0, max_calls=1)(_run_job)
    pending: dict[Any, Job] = {}
    queue = list(jobs)
    while (queue or pending) and stop.signum is None:
        while queue and len(pending) < parallel:
            job = queue.pop(0)
            job.run_dir = new_run_dir(job.cfg)
            pending[remote.remote(job.cfg, parent_run_id, job.run_dir, job.run_name)] = job
        shown.show(running(pending.values()))
        done, _ = ray.wait(list(pending), num_returns=1, timeout=0.25)  # a signal is seen between waits
        if not done:
            continue
        job = pending.pop(done[0])
        result = results[(job.variant, job.seed)] = outcome(done[0])
        if isinstance(result, RunFailed):
            write(f"  {job.variant:<28} seed {job.seed:<5} failed: {result.message}")
        else:
            write(f"  {job.variant:<28} seed {job.seed:<5} global {_pct(result.final_accuracy)}  "
                  f"personalized {_pct(result.personalized_accuracy)}  ({result.wall_seconds:.0f} s)")
        starting = queue[:max(0, parallel - len(pending))]  # submitted at the top of the next pass
        shown.advance(1, running([*pending.values(), *starting]))
    return pending


@dataclass
class RunFailed:
    """A run that failed (its RunError, orchestrator/driver/run_errors.py): `message` as the run said it (a method's fault
    with its last frames), `reason` its first line, for the table."""

    message: str

    @property
    def reason(self) -> str:
        return self.message.splitlines()[0]


def outcome(ref):
    """The RunResult of a run's task, or RunFailed where the run failed in a way it reports (a RunError); anything
    else raises."""
    import ray

    from orchestrator.driver.run_errors import RunError

    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as e:
        cause = e.cause
        while isinstance(cause, ray.exceptions.RayTaskError):  # Ray's copy of the class, not the error itself
            cause = cause.cause
        if not isinstance(cause, RunError):
            raise
        return RunFailed(str(cause))


def stop_runs(pending: dict[Any, Job], results: dict) -> None:
    """Stop the runs in flight: Ray interrupts each (a KeyboardInterrupt in its task, which ends its MLflow run
    KILLED and keeps its checkpoints, as a signal does to `mooring run`); those not ended within
    STOP_GRACE_SECONDS, or all of them on a second signal, are killed. A run that finished meanwhile is kept
    in `results`."""
    import ray

    for ref in pending:
        ray.cancel(ref, recursive=False)  # the run's own actor calls are its to end
    try:
        done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=STOP_GRACE_SECONDS)
    except KeyboardInterrupt:
        done = []
    for ref in pending:
        if ref not in done:
            ray.cancel(ref, force=True)
    for ref in done:
        try:
            result = outcome(ref)
        except Exception:  # noqa: BLE001 - interrupted (RunInterrupted in the task) or killed: not finished
            continue
        results[(pending[ref].variant, pending[ref].seed)] = result


def running(jobs) -> str:
    names = [f"{j.variant} s{j.seed}" for j in jobs]
    return "running: " + (", ".join(names[:4]) + (f" +{len(names) - 4}" if len(names) > 4 else "")) if names else ""


def _pct(v):
    return "   –   " if v is None else f"{100 * v:6.2f}%"


def parent_metrics(table: list[dict[str, Any]]) -> dict[str, float]:
    """The summary table as metrics of the compare parent run: VARIANT.COLUMN, None values left out; a character
    MLflow refuses in a metric's name (a variant such as "fedavg z=1") becomes "_"."""
    return {metric_name(f"{row['variant']}.{k}"): float(v) for row in table for k, v in row.items()
            if k not in ("variant",) and isinstance(v, (int, float)) and not isinstance(v, bool)}


def metric_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_\-. :/]", "_", name)


def save_outputs(comp: Comparison, out_dir: Path, title: str, columns: list[str] | None = None) -> list[Path]:
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from orchestrator.reporting.plots import has_clock, plot_against_time, plot_comparison

    out_dir.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(comp.rows)
    pacsv.write_csv(table, out_dir / "runs.csv")
    pq.write_table(table, out_dir / "runs.parquet")
    summary = pa.Table.from_pylist(summary_table(comp, columns))
    pacsv.write_csv(summary, out_dir / "summary.csv")
    pq.write_table(summary, out_dir / "summary.parquet")
    (out_dir / "histories.json").write_text(json.dumps(comp.histories))
    plot_comparison(comp.histories, out_dir / "accuracy.png", title=title)
    names = ["runs.csv", "runs.parquet", "summary.csv", "summary.parquet", "histories.json", "accuracy.png"]
    if has_clock(comp.histories):
        plot_against_time(comp.histories, out_dir / "accuracy_time.png", title=title)
        names.append("accuracy_time.png")
    return [out_dir / n for n in names]


# ------------------------------------------------------------------------------------------ pipeline
def compare(base, variants: dict[str, dict[str, Any]], seeds: list[int], out_dir: str | Path, *,
            address: str | None = None, parallel: int | None = None, actors_per_run: int = 1,
            echo=print, progress: bool = True, baseline: str | None = None, out_option: str = "--out",
            metrics: list[str] | None = None, columns: list[str] | None = None,
            given: dict[str, Any] | None = None) -> Comparison:
    """Every variant × seed (see the module's docstring); `out_dir` and every variant's config are checked before
    Ray starts and its actors against the cluster before the first run (orchestrator/driver/preflight.py), and
    `out_dir` is held from then on (orchestrator/io/output_lock.py; a refusal names it as `out_option`). With
    `baseline`, the report adds the paired differences against it (pipelines/paired.py), on `metrics` (summary
    figures or "KEY:AGG"; default the accuracies); `columns`: the summary table's figures beside the accuracies
    (default: pipelines/comparison.py, default_columns); `given`, the dotted keys the command set on the base
    config, names the MLflow runs with the variants (orchestrator/reporting/run_names.py)."""
    from orchestrator.io.output_lock import check_output_dir, holding_output
    from orchestrator.reporting.run_names import comparison_name

    check_parallel(parallel, "parallel")
    check_output_dir(out_dir, out_option)
    jobs = plan_jobs(base, variants, seeds, actors_per_run, given)
    check_judged_by_client(jobs[:len(variants)], {"--metric": metrics or [], "--columns": columns or []})
    with holding_output(out_dir, out_option):
        return _compare(base, variants, seeds, out_dir, jobs, address, parallel, actors_per_run, echo, progress,
                        baseline, metrics, columns, comparison_name(base.name, list(variants), given))


def check_judged_by_client(jobs: list[Job], named: dict[str, list[str]]) -> None:
    """A figure of the global model judged client by client needs every variant's runs to do so (eval.per_client):
    one ConfigError line naming the first that does not."""
    from pipelines.comparison import needs_per_client

    for option, names in named.items():
        for name in filter(needs_per_client, names):
            for job in jobs:
                if not job.cfg.eval.per_client.enabled:
                    from orchestrator.experiment.config import ConfigError

                    raise ConfigError(f"{option} {name}: variant {job.variant} does not judge the global model client "
                                      "by client; add --set eval.per_client.enabled=true (docs/fairness.md)")


def _compare(base, variants: dict[str, dict[str, Any]], seeds: list[int], out_dir: str | Path, jobs: list[Job],
             address: str | None, parallel: int | None, actors_per_run: int, echo, progress: bool,
             baseline: str | None, metrics: list[str] | None = None, columns: list[str] | None = None,
             name: str = "compare") -> Comparison:
    from orchestrator.driver.preflight import check_devices, check_variants
    from orchestrator.driver.signals import RunInterrupted
    from orchestrator.ray_runtime.ray_start import ensure_ray
    from orchestrator.reporting.plots import experiment_title
    from orchestrator.reporting.tracking import Tracker
    from pipelines.reports import write_comparison_report

    ensure_ray(address)
    check_variants({f"variant {j.variant}": j.cfg for j in jobs[:len(variants)]},
                   lambda cfg: check_devices(cfg, actors_per_run))
    parallel = parallel or default_parallel(actors_per_run, base.resources.cpus_per_actor)
    tracker = Tracker(jobs[0].cfg.tracking.uri, base.tracking.experiment, base.tracking.enabled)
    tracker.start(name, {"variants": ",".join(variants), "seeds": ",".join(map(str, seeds))},
                  {"kind": "compare", "dataset": base.data.dataset})
    echo(f"comparing {len(variants)} variants × {len(seeds)} seeds, {parallel} at a time")
    from orchestrator.server.robust_round import robustness_note

    for note in dict.fromkeys(robustness_note(j.cfg) for j in jobs[:len(variants)]):
        if note:
            echo(f"note: {note}")
    try:
        comp = run_jobs(jobs, parallel, tracker.run_id, echo, progress)
    except BaseException:
        tracker.end("FAILED")
        raise
    comp.settings = variants
    if comp.rows:
        title = experiment_title(base, seeds)
        columns = default_columns(comp) if columns is None else columns
        for path in save_outputs(comp, Path(out_dir), title=title, columns=columns):
            tracker.log_artifact(path)
        table = summary_table(comp, columns)
        tracker.log_artifact(write_comparison_report(comp, table, variants, Path(out_dir), title, tracker, baseline,
                                                     columns, metrics))
        tracker.log_summary(parent_metrics(table))
        tracker.log_table(table, "summary_table.json")
    if comp.stopped is not None:
        tracker.end_running_children("KILLED")
        tracker.end("KILLED")
        raise RunInterrupted(stopped_message(comp, len(jobs), out_dir), comp.stopped.signum)
    tracker.end("FAILED" if comp.failed else "FINISHED")
    return comp


def stopped_message(comp: Comparison, total: int, out_dir: str | Path) -> str:
    """One line: how many runs finished and where their tables are, and each unfinished run with the command
    that continues it from its checkpoint (or that it never started)."""
    from orchestrator.io.checkpoint import latest_checkpoint

    def fate(job: Job) -> str:
        if job.run_dir is None:
            return "not started"
        if latest_checkpoint(job.run_dir) is None:
            return "stopped before its first checkpoint"
        return f"continue with `mooring run --resume {job.run_dir}`"

    done = (f"{len(comp.rows)} of {total} runs finished, their tables in {out_dir}" if comp.rows
            else f"none of the {total} runs finished, no tables written")
    left = "; ".join(f"{job.variant} seed {job.seed}: {fate(job)}" for job in comp.stopped.unfinished)
    return f"stopped; {done}; {left}"


# --------------------------------------------------------------------------------------------- CLI
def configure(parser) -> None:
    add_config_args(parser)
    add_address_arg(parser)
    parser.add_argument("--algorithms", default=None, metavar="A,B,...",
                        help="comma-separated algorithm names (default: the config's algorithm.name)")
    parser.add_argument("--all-algorithms", action="store_true",
                        help="every registered method but the protocol variants (fedavg_pm, local_pm, ...)")
    parser.add_argument("--seeds", default=None, metavar="S,S,...", help="comma-separated seeds (default: the config's seed)")
    parser.add_argument("--out", default="results/compare", metavar="DIR",
                        help="directory for the tables, histories and plot (default: results/compare); one "
                             "command at a time writes it")
    parser.add_argument("--parallel", type=int, default=None, metavar="N",
                        help="runs at once (default: as many as the cluster's CPUs hold)")
    parser.add_argument("--output-json", default=None, metavar="PATH",
                        help="also write the summary table (one object per variant) as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress bar (finished runs are still listed)")
    parser.add_argument("--variant", dest="variants", action="append", default=[], metavar="'LABEL=ALGORITHM KEY=VALUE ...'",
                        help="a variant with its own label and overrides, repeatable: --variant "
                             "'scaffold_sgd=scaffold train.optimizer.momentum=0' (with or instead of --algorithms)")
    parser.add_argument("--variants-file", default=None, metavar="YAML",
                        help="variants from a file: `variants: {LABEL: {algorithm.name: A, KEY: VALUE, ...}, ...}`")
    parser.add_argument("--baseline", default=None, metavar="VARIANT",
                        help="also compare every variant with this one, seed by seed: paired differences, their "
                             "mean, 95 %% interval, wins and p (as `mooring claims` judges them)")
    parser.add_argument("--metric", default=None, metavar="NAME,...",
                        help="with --baseline: the figures paired instead of the global and personalized final "
                             "accuracies: summary figures (worst10_accuracy, client_accuracy_std, "
                             "final_global_accuracy, bytes_sent, ...; docs/fairness.md) or metrics of the rounds as "
                             "KEY:AGG (accuracy_worst:best)")
    parser.add_argument("--columns", default=None, metavar="NAME,...",
                        help="the figures the table shows beside the accuracies, mean ± std over seeds (the same "
                             "names as --metric; default: the fairness figures where the runs judged the global "
                             "model client by client, eval.per_client)")
    add_outside_code_arg(parser)


def every_method() -> list[str]:
    """Every registered method but the variants kept for one paper's protocol."""
    from tasks.algorithms import ALGORITHMS

    return [name for name in ALGORITHMS.names() if not ALGORITHMS.get(name).protocol_variant]


def parse_list(text: str | None, kind=str, option: str = "", example: str = "fedavg,fedprox") -> list:
    """The comma-separated values of an option ([] when it is not given). A given option must list something:
    `--seeds ""` or `--seeds ,` silently meant the config's seed, so an empty item is one ConfigError line."""
    if text is None:
        return []
    items = [x.strip() for x in text.split(",")]
    try:
        if all(items):
            return [kind(x) for x in items]
    except ValueError:
        pass
    from orchestrator.experiment.config import ConfigError

    what = "integers" if kind is int else "names"
    raise ConfigError(f"{option} {text!r}: expected comma-separated {what}, for example {example}")


def check_parallel(value: object, option: str = "--parallel") -> None:
    """Runs at once: None (as many as the CPUs hold) or a whole number of at least 1. Zero was read as the
    default, and a negative number started no run at all."""
    from numbers import Integral

    if value is None or (isinstance(value, Integral) and not isinstance(value, bool) and value >= 1):
        return
    from orchestrator.experiment.config import ConfigError

    raise ConfigError(f"{option} {value!r}: runs at once must be a whole number, at least 1 (leave it out for as "
                      "many as the CPUs hold)")


def refuse_shadowed(given: dict[str, Any], layers: dict[str, dict[str, Any]], option: str = "--set") -> None:
    """Refuse an override the runs would not see: `given` ({dotted key: value}, the command line's --set) goes on the
    base config, and each of `layers` (what → its overrides: a variant, a setting) is applied over it, so a key
    one of them sets too (or a section holding it, or a key inside it) would silently lose. The same value twice is
    no conflict."""
    for key, value in given.items():
        for what, overrides in layers.items():
            for other, theirs in overrides.items():
                same_key = other == key and theirs == value
                if not same_key and (other == key or other.startswith(key + ".") or key.startswith(other + ".")):
                    from orchestrator.experiment.config import ConfigError

                    raise ConfigError(f"{option} {key}: {what} sets {other} itself ({theirs!r}), which would win "
                                      f"over it; set it there, or leave it out")


def dotted_set(overrides: list[str]) -> dict[str, Any]:
    """The command line's --set as {dotted key: value}."""
    from orchestrator.experiment.config import parse_override

    return {".".join(path): value for path, value in map(parse_override, overrides)}


def refuse_duplicates(option: str, text: str | None, values: list) -> None:
    """Each variant and seed once: a repeated one would silently run once (and name one row twice)."""
    repeated = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if repeated is not None:
        from orchestrator.experiment.config import ConfigError

        raise ConfigError(f"{option} {text}: {repeated} is given more than once; give each once")


def main(args) -> int:
    from orchestrator.arguments import check_output_file
    from orchestrator.experiment.config import ConfigError, load_config

    check_parallel(args.parallel)
    apply_outside_code(args)  # before any method is looked up: an outside one would be imported
    variants = requested_variants(args)  # outside methods imported first, so that --set may name their blocks
    base = load_config(args.config, args.overrides)
    refuse_shadowed(dotted_set(args.overrides), {f"variant {label}": o for label, o in variants.items()})
    variants = variants or named_variants([base.algorithm.name], "algorithm.name")
    seeds = parse_list(args.seeds, int, "--seeds", "0,1,2") or [base.seed]
    refuse_duplicates("--seeds", args.seeds, seeds)
    args.baseline = variant_called(args.baseline, variants, "--baseline")
    metrics = figures_option(args.metric, "--metric")
    columns = figures_option(args.columns, "--columns")
    if metrics and args.baseline is None:
        raise ConfigError(f"--metric {args.metric}: the paired test needs --baseline VARIANT")
    if args.output_json:
        check_output_file(args.output_json)
    comp = compare(base, variants, seeds, args.out, address=args.address, parallel=args.parallel,
                   echo=lambda s: print(s, file=sys.stderr), progress=not args.quiet, baseline=args.baseline,
                   metrics=metrics, columns=columns, given=dotted_set(args.overrides))
    columns = default_columns(comp) if columns is None else columns
    table = summary_table(comp, columns)
    print(format_table(table, columns))
    paired = paired_section(comp, args.baseline, metrics)
    if paired is not None:
        print("\n" + paired[0])
    if args.output_json:
        Path(args.output_json).write_text(json.dumps(
            table if paired is None else {"variants": table, "paired": paired[1]}, indent=1))
    print(f"saved {args.out}/runs.csv, runs.parquet, summary.csv, accuracy.png, report.html, report.md"
          + (f"; MLflow parent run {comp.parent_run_id}" if comp.parent_run_id else ""))
    if comp.failed:
        from orchestrator.errors import RUN_ERROR

        print(f"error: {len(comp.failed)} of {len(comp.rows)} runs failed (marked FAILED in the table)", file=sys.stderr)
        return RUN_ERROR
    return 0


def figures_option(text: str | None, option: str) -> list[str] | None:
    """--metric or --columns: the figures named, each checked (pipelines/comparison.py, check_figure); None when
    the option is not given."""
    if text is None:
        return None
    from pipelines.comparison import check_figure

    names = parse_list(text, str, option, "worst10_accuracy,client_accuracy_std")
    refuse_duplicates(option, text, names)
    return [check_figure(name, option) for name in names]


def paired_section(comp: Comparison, baseline: str | None,
                   metrics: list[str] | None = None) -> tuple[str, list[dict]] | None:
    """The paired table against the baseline (text, JSON rows), or None without a baseline."""
    if baseline is None:
        return None
    from pipelines.paired import as_json, format_paired, paired_rows

    rows = paired_rows(comp, baseline, metrics)
    return format_paired(rows, baseline, metrics), as_json(rows)


def requested_variants(args) -> dict[str, dict[str, Any]]:
    """{label: overrides} from --algorithms (or --all-algorithms), --variant and --variants-file, in that order,
    each named algorithm found (an outside one imported) before the base config is read; empty: none given."""
    from orchestrator.experiment.config import ConfigError

    names = every_method() if args.all_algorithms else parse_list(args.algorithms, str, "--algorithms")
    refuse_duplicates("--algorithms", args.algorithms, names)
    variants = named_variants(names, "--algorithms")
    given = [parse_variant(text) for text in args.variants]
    given += list(read_variants_file(args.variants_file).items()) if args.variants_file else []
    for label, overrides in given:
        if label in variants:
            raise ConfigError(f"--variant {label}: the label is given more than once; give each variant its own")
        variants[label] = overrides
    for label, overrides in given:
        if "algorithm.name" in overrides:
            find_algorithm(label, str(overrides["algorithm.name"]), "--variant")
    return variants


def variant_called(name: str | None, variants: dict[str, dict[str, Any]], option: str) -> str | None:
    """The label of the variant `name` names: a label, or the method a variant runs alone (an outside method's
    module:Class reference); a ConfigError line where it names none."""
    if name is None or name in variants:
        return name
    label = next((label for label, o in variants.items() if o == {"algorithm.name": name}), None)
    if label is None:
        from orchestrator.experiment.config import ConfigError

        raise ConfigError(f"{option} {name}: not a variant of this comparison; variants: {', '.join(variants)}")
    return label


def named_variants(names: list[str], option: str) -> dict[str, dict[str, Any]]:
    """A variant of each method named, found first (an outside one imported), under the label the comparison
    calls it by (pipelines/comparison.py, method_label: a class's label or name, not its module:Class
    reference); methods that would share a label keep their names."""
    from pipelines.comparison import method_label

    for name in names:
        find_algorithm(name, name, option)
    labels = [method_label(name) for name in names]
    return {label if labels.count(label) == 1 else name: {"algorithm.name": name} for name, label in zip(names, labels)}


def parse_variant(text: str) -> tuple[str, dict[str, Any]]:
    """'LABEL=ALGORITHM KEY=VALUE ...' → (LABEL, {"algorithm.name": ALGORITHM, KEY: VALUE, ...})."""
    import shlex

    from orchestrator.experiment.config import ConfigError, parse_override

    try:
        words = shlex.split(text)
    except ValueError as e:
        raise ConfigError(f"--variant {text!r}: {e}") from None
    label, _, algorithm = (words[0] if words else "").partition("=")
    if not label or not algorithm:
        raise ConfigError(f"--variant {text!r}: expected 'LABEL=ALGORITHM KEY=VALUE ...', for example "
                          "'scaffold_sgd=scaffold train.optimizer.momentum=0'")
    overrides: dict[str, Any] = {"algorithm.name": algorithm}
    for word in words[1:]:
        path, value = parse_override(word)
        overrides[".".join(path)] = value
    return label, overrides


def read_variants_file(path: str) -> dict[str, dict[str, Any]]:
    """A comparison file's `variants:` mapping, label → {dotted key: value} (algorithm.name among them)."""
    from orchestrator.experiment.config import ConfigError, read_yaml

    raw = read_yaml(path)
    variants = raw.get("variants")
    if set(raw) != {"variants"} or not isinstance(variants, dict) or not variants:
        raise ConfigError(f"{path}: expected one key, `variants:`, mapping each label to its overrides "
                          "({algorithm.name: A, KEY: VALUE, ...})")
    for label, overrides in variants.items():
        if not isinstance(overrides, dict) or not all(isinstance(k, str) for k in overrides):
            raise ConfigError(f"{path}: variants.{label}: expected a mapping of dotted keys to values, "
                              f"got {overrides!r}")
    return {str(label): dict(overrides) for label, overrides in variants.items()}


def find_algorithm(label: str, name: str, option: str) -> None:
    from orchestrator.experiment.config import ConfigError
    from tasks.algorithms import ALGORITHMS
    from tasks.registry import RegistryError

    try:
        ALGORITHMS.find(name)
    except RegistryError as e:
        where = f"{option}: {name}" if option == "--algorithms" else f"{option} {label}: {name}"
        raise ConfigError(f"{where}: {e}") from None
