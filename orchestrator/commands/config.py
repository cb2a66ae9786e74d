"""`mooring config show|check CONFIG [--set k=v ...]`: the resolved config, every default filled in, including
the hyperparameters of the algorithm it runs (`algorithm.NAME`, at the paper's defaults where unset); or only
whether it is valid, output directories included (exit 0, or 2 with one line saying what is wrong)."""
from __future__ import annotations

from orchestrator.arguments import add_config_args, add_outside_code_arg, apply_outside_code


def configure(parser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = sub.add_parser("show", help="print the resolved config as YAML, the active algorithm's block with its "
                                       "defaults")
    check = sub.add_parser("check", help="check the config and that its output directories can be written, "
                                         "without running anything")
    for action in (show, check):
        add_config_args(action)
        add_outside_code_arg(action)


def resolved_yaml(cfg) -> str:
    import yaml

    raw = cfg.to_dict()
    raw["algorithm"][cfg.algorithm.block_name] = cfg.algorithm.params_for().model_dump(mode="json")
    return yaml.safe_dump(raw, sort_keys=False)


def main(args) -> int:
    from orchestrator.experiment.config import load_config

    apply_outside_code(args)
    cfg = load_config(args.config, args.overrides)
    if args.action == "check":
        from orchestrator.driver.run_dir import check_output_dirs

        check_output_dirs(cfg)
        print(f"{args.config}: valid")
        return 0
    print(resolved_yaml(cfg), end="")
    return 0
