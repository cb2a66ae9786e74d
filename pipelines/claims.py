"""`mooring claims`: the papers' claims, checked on real digits, written to docs/claims.md.

Each `configs/claims/*.yaml` is a runnable experiment plus a `claims:` block (orchestrator/experiment/config.py,
ClaimsConfig): settings × methods × seeds, run through `mooring compare` (same partition for every method
of a seed), and statements judged on paired per-seed differences to a baseline:

    holds  ⇔  mean paired difference has the expected sign, the method wins ≥ min_wins seeds
              (default ⌈0.8 × seeds⌉), and, where max_p is set, a one-sided paired t-test gives p < max_p.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from orchestrator.arguments import add_outside_code_arg, apply_outside_code
from pipelines.compare import Comparison, compare
from pipelines.comparison import metric_scale
from pipelines.paired import Verdict, paired_verdict
from tasks.json_data import JsonProblem, parse_json


# ---------------------------------------------------------------------------------------- running
def base_experiment(cfg):
    from orchestrator.experiment.config import build_config

    raw = cfg.to_dict()
    raw.pop("claims")
    return build_config(raw, cfg.name)


def apply_budget(cfg, budget: str, source: str, overrides: list[str] = ()):
    """The claims config at budget `budget`: "short" is the config as written; any other is one of its
    `claims.budgets` (overrides on every run, and optionally other seeds and settings). The command line's
    `overrides` (--set) are applied last, so they win over the budget's."""
    from orchestrator.experiment.config import ConfigError, apply_overrides, build_config, set_dotted

    if budget == "short":
        return cfg
    if budget not in cfg.claims.budgets:
        allowed = ", ".join(["short", *cfg.claims.budgets])
        raise ConfigError(f"{source}: --budget {budget!r}: not a budget of this protocol; allowed: {allowed}")
    b = cfg.claims.budgets[budget]
    raw = cfg.to_dict()
    for key, value in b.overrides.items():
        set_dotted(raw, key, value)
    raw["claims"]["seeds"] = b.seeds or cfg.claims.seeds
    raw["claims"]["settings"] = b.settings or cfg.claims.settings
    raw["name"] = f"{cfg.name}.{budget}"
    return build_config(apply_overrides(raw, list(overrides)), source)


def check_names(cfg) -> None:
    from orchestrator.experiment.config import ConfigError

    claims = cfg.claims
    for check in claims.checks:
        for role, name, pool in (("setting", check.setting, claims.settings), ("method", check.method, claims.methods),
                                 ("baseline", check.baseline, claims.methods)):
            if name not in pool:
                raise ConfigError(f"{cfg.name}: claims check {check.statement[:40]!r}: unknown {role} {name!r}; "
                                  f"allowed: {', '.join(pool)}")


def check_protocol(cfg, seeds: list[int] | None = None) -> None:
    """Every setting × method of the protocol checked (pipelines/compare.py, plan_jobs) before anything runs."""
    from orchestrator.driver.preflight import refusal, refusal_lines
    from orchestrator.experiment.config import ConfigError, with_overrides
    from pipelines.compare import plan_jobs

    check_names(cfg)
    base, problems = base_experiment(cfg), []
    for setting, overrides in cfg.claims.settings.items():
        try:
            plan_jobs(with_overrides(base, overrides), cfg.claims.methods, (seeds or cfg.claims.seeds)[:1], 1)
        except ConfigError as e:  # one line per refused variant
            problems += [f"{cfg.name}, setting {setting}, {line.removeprefix('config: ')}" for line in refusal_lines(e)]
    if problems:
        raise refusal(problems)


def run_claims(cfg, out_dir: Path, seeds: list[int] | None = None, address: str | None = None,
               echo=print, report_only: bool = False) -> tuple[dict[str, Comparison], list[Verdict]]:
    """Run the protocol (or, with report_only, reload the histories a previous run saved in out_dir)."""
    from orchestrator.experiment.config import with_overrides

    check_names(cfg)
    claims, base = cfg.claims, base_experiment(cfg)
    seeds = seeds or claims.seeds
    comps: dict[str, Comparison] = {}
    for setting, overrides in claims.settings.items():
        if report_only:
            comps[setting] = saved_comparison(out_dir / setting, claims.methods, "run the claims again to write them")
            continue
        echo(f"{cfg.name} / {setting}")
        comps[setting] = compare(with_overrides(base, overrides), claims.methods, seeds, out_dir / setting,
                                 address=address, echo=echo, out_option="--results")
        comps[setting].require_finished(f"{cfg.name} / {setting}")
    verdicts = [paired_verdict(c, comps[c.setting], c.metric or claims.metric) for c in claims.checks]
    return comps, verdicts


def saved_comparison(setting_dir: Path, wanted=(), rerun: str = "run them again to write them") -> Comparison:
    """The histories compare saved in `setting_dir`, each of the `wanted` variants among them with a seed at
    least (a missing one would be judged on no runs at all)."""
    from orchestrator.experiment.config import ConfigError

    path = setting_dir / "histories.json"
    if not path.exists():
        raise ConfigError(f"--report-only: no saved results at {path}; run the claims first")
    try:
        raw = parse_json(path.read_bytes())
    except JsonProblem as e:
        raise ConfigError(f"--report-only: {path}: {e}; run the claims again to write it") from None
    problem = not_histories(raw)
    if problem:
        raise ConfigError(f"--report-only: {path}: {problem}; run the claims again to write it")
    missing = [v for v in wanted if not raw.get(v)]
    if missing:
        held = ", ".join(v for v in raw if raw[v]) or "none"
        raise ConfigError(f"--report-only: {path}: no runs of {', '.join(missing)} (it holds {held}); {rerun}")
    return Comparison(histories={v: {int(seed): h for seed, h in by_seed.items()} for v, by_seed in raw.items()})


def not_histories(raw: object) -> str | None:
    """Why `raw` is not what compare writes to histories.json (None: it is): {variant: {seed: [round's metrics]}},
    a round's metrics an object of numbers (or null)."""
    shape = 'not {"variant": {"seed": [{"metric": number, ...}, ...]}} as mooring compare writes it'
    if not isinstance(raw, dict) or not all(isinstance(by_seed, dict) for by_seed in raw.values()):
        return shape
    for variant, by_seed in raw.items():
        for seed, history in by_seed.items():
            if not (seed.isascii() and seed.isdigit()):
                return f"{variant}: {seed[:40]!r} is not a seed (0, 1, 2, ...)"
            if not isinstance(history, list) or not all(
                    isinstance(m, dict) and all(v is None or type(v) in (int, float) for v in m.values())
                    for m in history):
                return f"{variant}, seed {seed}: {shape}"
    return None


# --------------------------------------------------------------------------------------- reporting
def _mean_std(vals: list[float], scale: float = 100.0) -> str:
    vals = [v for v in vals if v is not None]
    if not vals:
        return "n/a"
    digits = 2 if scale == 100 else 3
    return f"{scale * np.mean(vals):.{digits}f} ± {scale * np.std(vals):.{digits}f}"


def render_section(cfg, comps: dict[str, Comparison], verdicts: list[Verdict], command: str) -> str:
    claims = cfg.claims
    config_name, _, budget = cfg.name.partition(".")
    lines = [f"## {claims.title}" + (f" ({budget} budget)" if budget else ""), ""]
    if claims.spec:
        lines.append(f"Protocol: `{claims.spec}`. Config: `configs/claims/{config_name}.yaml`. Seeds: "
                     f"{', '.join(map(str, next(iter(comps.values())).histories[next(iter(claims.methods))]))}. "
                     f"Metric: `{claims.metric}` (accuracies in %, diagnostics as measured). Reproduce: `{command}`.")
        lines.append("")
    lines += ["### Measured (mean ± std over seeds)", "",
              "| method | " + " | ".join(comps) + " |", "|---|" + "---|" * len(comps)]
    for method in claims.methods:
        cells = [_mean_std(list(comps[s].values(method, claims.metric).values())) for s in comps]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines += ["", "### Claims", "",
              "| paper's statement | setting | method − baseline | metric | method | baseline | paired diff | wins | p | holds |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for v in verdicts:
        scale = metric_scale(v.metric)
        digits = 2 if scale == 100 else 3
        diff = f"{scale * np.mean(v.diffs):+.{digits}f} ± {scale * np.std(v.diffs):.{digits}f}" if v.diffs else "n/a"
        p = "n/a" if v.p_value is None else f"{v.p_value:.3f}"
        lines.append(f"| {v.statement} | {v.setting} | {v.method} − {v.baseline} | `{v.metric}` | "
                     f"{_mean_std(v.method_values, scale)} | {_mean_std(v.baseline_values, scale)} | {diff} | "
                     f"{v.wins}/{len(v.diffs)} (need {v.needed_wins}) | {p} | {'**yes**' if v.holds else 'no'} |")
    if claims.notes:
        lines += ["", claims.notes.strip()]
    return "\n".join(lines) + "\n"


READING = "### Reading"


def write_report(sections: dict[str, str], path: Path) -> None:
    """docs/claims.md: one section per claims config; sections not re-run this time are kept, and so is the
    `### Reading` of a section that is re-run (what the tables show, written by a person after reading them;
    it lives here only, never in a config)."""
    existing = _read_sections(path)
    for name, text in sections.items():
        existing[name] = text + kept_reading(existing.get(name, ""))
    header = ("# The papers' claims on real digits\n\n"
              "Written by `make claims` (`mooring claims`). Every number is measured by Mooring on scikit-learn's "
              "`load_digits`, mean ± std over seeds; each claim is judged on paired per-seed differences to its "
              "baseline on the same partition (see `pipelines/claims.py` for the rule). A claim that does not hold "
              "at this scale is reported as measured.\n\n")
    body = "".join(f"<!-- claims:{name} -->\n{text}\n" for name, text in sorted(existing.items()))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + body)


def kept_reading(section: str) -> str:
    """The `### Reading` part of a section (to its end), or nothing."""
    start = section.find(f"\n{READING}\n")
    return "" if start < 0 else section[start:].rstrip() + "\n"


def _read_sections(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    sections, name, buf = {}, None, []
    for line in path.read_text().splitlines(keepends=True):
        if line.startswith("<!-- claims:"):
            if name:
                sections[name] = "".join(buf).rstrip() + "\n"
            name, buf = line.strip()[len("<!-- claims:"):-len(" -->")], []
        elif name:
            buf.append(line)
    if name:
        sections[name] = "".join(buf).rstrip() + "\n"
    return sections


# --------------------------------------------------------------------------------------------- CLI
def configure(parser) -> None:
    parser.add_argument("configs", nargs="*", metavar="CLAIMS_CONFIG", help="default: configs/claims/*.yaml")
    parser.add_argument("--out", default="docs/claims.md", metavar="MARKDOWN",
                        help="report to write; sections of configs not run this time are kept (default: docs/claims.md)")
    parser.add_argument("--results", default="results/claims",
                        help="directory for the per-setting tables; one command at a time writes it (and the report)")
    parser.add_argument("--seeds", default=None, help="override the configs' seeds (comma-separated)")
    parser.add_argument("--address", default=None, metavar="RAY_ADDRESS",
                        help="an existing Ray cluster (HOST:PORT, ray://HOST:10001 or auto); default: RAY_ADDRESS "
                             "if set, else a new local Ray instance")
    parser.add_argument("--report-only", action="store_true",
                        help="rewrite the report from the histories saved under --results, running nothing")
    parser.add_argument("--budget", default="short", metavar="NAME",
                        help="short (default): the configs as written, for `make claims`; full: the specs' protocols "
                             "(each config's claims.budgets.full; benchmarks/README.md lists the expected durations)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override every run of the protocol (a smaller budget: --set train.rounds=30); "
                             "recorded in the report's reproduce command")
    add_outside_code_arg(parser)


def main(args) -> int:
    from orchestrator.experiment.config import ConfigError, load_config
    from orchestrator.io.output_lock import holding_output
    from pipelines.compare import dotted_set, parse_list, refuse_shadowed

    apply_outside_code(args)
    paths = args.configs or sorted(str(p) for p in Path("configs/claims").glob("*.yaml"))
    configs = [load_config(p, args.overrides) for p in paths]
    for cfg, path in zip(configs, paths):
        if cfg.claims is None:
            raise ConfigError(f"{path}: no `claims:` block")
    configs = [apply_budget(cfg, args.budget, path, args.overrides) for cfg, path in zip(configs, paths)]
    for cfg in configs:  # a setting's or method's own value of a key would win over --set's
        refuse_shadowed(dotted_set(args.overrides),
                        {**{f"{cfg.name}: setting {s}": o for s, o in cfg.claims.settings.items()},
                         **{f"{cfg.name}: method {m}": o for m, o in cfg.claims.methods.items()}})
    seeds = parse_list(args.seeds, int, "--seeds", "0,1,2") or None
    check_outputs(args, configs)
    if not args.report_only:
        for cfg in configs:  # every protocol's every run checked before the first starts
            check_protocol(cfg, seeds)
    with holding_output(args.results, "--results"):  # the report too: two commands would each drop the other's sections
        sections = {}
        for cfg, path in zip(configs, paths):
            comps, verdicts = run_claims(cfg, Path(args.results) / cfg.name, seeds, args.address,
                                         echo=lambda s: print(s, file=sys.stderr), report_only=args.report_only)
            command = " ".join(["mooring claims", path,
                                *(f"--budget {args.budget}" for _ in [0] if args.budget != "short"),
                                *(f"--seeds {args.seeds}" for _ in [0] if args.seeds),
                                *(f"--set {o}" for o in args.overrides)])
            sections[cfg.name] = render_section(cfg, comps, verdicts, command)
            (Path(args.results) / cfg.name / "verdicts.json").write_text(
                json.dumps([v.__dict__ for v in verdicts], indent=1))
            print(sections[cfg.name])
        write_report(sections, Path(args.out))
    print(f"wrote {args.out}")
    return 0


def check_outputs(args, configs) -> None:
    """The report and every directory the protocols write (--results/CONFIG/SETTING) can be written, or one line,
    before anything runs."""
    from orchestrator.io.output_lock import check_output_dir, check_report_file

    check_report_file(args.out, "--out")
    check_output_dir(args.results, "--results")
    for cfg in configs:
        for setting in cfg.claims.settings:
            check_output_dir(Path(args.results) / cfg.name / setting, "--results")

