"""`mooring ui`: the MLflow UI on the same store that runs log to."""
from __future__ import annotations

import subprocess
import sys


def configure(parser) -> None:
    parser.add_argument("--uri", default=None, help="tracking store (default: as runs resolve it)")
    parser.add_argument("--port", type=int, default=5000)
    parser.add_argument("--host", default="127.0.0.1")


def main(args) -> int:
    from orchestrator.tracking import resolve_uri

    uri = resolve_uri(args.uri)
    if uri.startswith(("http://", "https://")):
        print(f"runs are on a tracking server: open {uri} in a browser")
        return 0
    print(f"MLflow UI for {uri} at http://{args.host}:{args.port} (Ctrl-C to stop)")
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", args.host, "--port", str(args.port)]
    return subprocess.call(cmd)
