"""Put KaTeX where the documentation site's build finds it: `python -m orchestrator.docs.katex`.

The site typesets its formulas in the browser with KaTeX (MIT), bundled into the built site so that no page
loads anything from elsewhere. The files come from the `katex` package of the npm registry, version 0.16.22,
fetched by npm itself (`npm pack`, which checks the registry's own integrity hash) and then checked against the
sha256 pinned here before the archive is opened. What is taken: `katex.min.js`, `katex.min.css`, the woff2 fonts,
the auto-render extension and the licence; none of the package's code runs here. `make install` runs this once
per environment (as it fetches MNIST: tasks/data/registry_files.py).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from tasks.data import registry_files
from tasks.data.registry_files import InstallError

PACKAGE, VERSION = "katex", "0.16.22"
ARCHIVE = f"{PACKAGE}-{VERSION}.tgz"
SHA256 = "e9e0d167db3175481cbadaff38e8d90b130f6a3ddb451a47e43c577fd511f365"
WHAT = f"{PACKAGE} {VERSION} archive"
# the members taken, relative to the archive's package/dist/ (fonts: every woff2 under fonts/)
FILES = ("katex.min.js", "katex.min.css", "contrib/auto-render.min.js")
FONTS = "fonts/"
LICENSE = "package/LICENSE"


def installed_dir() -> Path:
    """Where `make install` puts KaTeX: inside the environment, so every checkout using it finds it
    (MOORING_KATEX_DIR, where set, names another place)."""
    return Path(os.environ.get("MOORING_KATEX_DIR") or Path(sys.prefix) / "share" / "mooring" / "katex")


def installed(root: Path) -> bool:
    return all((root / name).is_file() for name in FILES) and any((root / FONTS).glob("*.woff2"))


def download(directory: Path) -> Path:
    """The pinned archive, packed by npm from the registry into `directory`; not opened."""
    npm = shutil.which("npm")
    if npm is None:
        raise InstallError("npm is not installed: it fetches KaTeX for the documentation site (Debian: apt-get "
                           "install npm)")
    done = subprocess.run([npm, "pack", f"{PACKAGE}@{VERSION}", "--silent", "--pack-destination", str(directory)],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise InstallError(f"npm pack {PACKAGE}@{VERSION} failed: {last}")
    return directory / ARCHIVE


def extract(archive: Path, dest: Path) -> int:
    """KaTeX's files of `archive` (checked against the pinned sha256 before it is opened) into `dest`, replacing
    it whole; returns how many files."""
    registry_files.check_sha256(archive, SHA256, WHAT)
    count = 0
    with registry_files.staged(dest) as staging, tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            relative = taken(member.name)
            if relative is None or not member.isfile():
                continue
            target = staging / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(tar.extractfile(member).read())
            count += 1
        if not installed(staging):
            raise InstallError(f"{archive}: not KaTeX's dist (no {', '.join(FILES)} and fonts in it)")
    return count


def taken(name: str) -> str | None:
    """Where a member of the archive goes under the destination, or None for one not taken."""
    if name == LICENSE:
        return "LICENSE"
    relative = name.removeprefix("package/dist/")
    if relative in FILES or (relative.startswith(FONTS) and relative.endswith(".woff2") and "/" not in
                             relative.removeprefix(FONTS)):
        return relative
    return None


def install(dest: Path, archive: Path | None = None) -> int:
    """KaTeX into `dest` from `archive`, or from the archive npm fetches; returns how many files."""
    return registry_files.install(dest, archive, download, extract)


def main(argv: list[str] | None = None) -> int:
    return registry_files.main(argv, __doc__.splitlines()[0], installed_dir(), f"a downloaded {ARCHIVE}", install,
                               lambda count, dest: f"{count} files of KaTeX {VERSION} (MIT) in {dest}",
                               (tarfile.TarError, subprocess.TimeoutExpired))


if __name__ == "__main__":
    sys.exit(main())
