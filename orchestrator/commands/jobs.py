"""`mooring jobs list | status ID | logs ID [--follow] | stop ID`: the jobs of a Ray cluster (see `mooring submit`)."""
from __future__ import annotations

import sys
from datetime import datetime

from orchestrator.ray_runtime.cluster import add_cluster_args, first_line, printable

STOP_HEAD = ("A Ray head started for Mooring (`ray start --head`) keeps running after its jobs end; stop it with "
             "`ray stop` on the head node, and on each worker node that joined it (from the environment that "
             "started it). `mooring jobs stop ID` stops one job, not the cluster.")


def configure(parser) -> None:
    parser.epilog = STOP_HEAD
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add_cluster_args(sub.add_parser("list", help="every job the cluster knows, newest first"))
    for action, help_text in (("status", "a job's status and Ray's message about it"),
                              ("logs", "a job's logs so far"), ("stop", "stop a running job")):
        p = sub.add_parser(action, help=help_text)
        p.add_argument("job_id", metavar="ID", help="the id `mooring submit` printed")
        add_cluster_args(p)
        if action == "logs":
            p.add_argument("--follow", action="store_true", help="go on printing until the job ends")


def main(args) -> int:
    from orchestrator.ray_runtime.cluster import JobsAPI

    api = JobsAPI(args.address, args.token_file, args.allow_plain_http)
    return {"list": list_jobs, "status": show_status, "logs": show_logs, "stop": stop_job}[args.action](api, args)


def list_jobs(api, _args) -> int:
    jobs = sorted(api.call("list_jobs"), key=lambda j: j.start_time or 0, reverse=True)
    if not jobs:
        print(f"no jobs on {api.url}")
        return 0
    print(f"{'id':<28} {'status':<10} {'started':<19}  entrypoint")
    for job in jobs:
        print(f"{job.submission_id or job.job_id:<28} {job.status.value:<10} {when(job.start_time):<19}  "
              f"{shorten(printable(job.entrypoint or ''), 70)}")
    return 0


def show_status(api, args) -> int:
    info = api.call("get_job_info", args.job_id)
    print(f"{args.job_id}: {info.status.value}")
    print(f"  started  {when(info.start_time)}" + (f", ended {when(info.end_time)}" if info.end_time else ""))
    print(f"  command  {printable(info.entrypoint, 2000)}")
    if info.message:
        print(f"  message  {first_line(info.message)}")
    return 0


def show_logs(api, args) -> int:
    if args.follow:
        api.follow(args.job_id)
    else:
        sys.stdout.write(api.call("get_job_logs", args.job_id))
    return 0


def stop_job(api, args) -> int:
    if api.call("stop_job", args.job_id):
        print(f"stopping {args.job_id}")
    else:
        print(f"{args.job_id} is not running ({api.status(args.job_id)})")
    return 0


def when(ms: int | None) -> str:
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S") if ms else "-"


def shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
