"""KaTeX for the documentation site (orchestrator/docs/katex.py): the npm registry's pinned archive, checked before it
is opened, its dist files only kept. The checks run on tiny archives the tests write; `make install` fetches the
real one (the site's build, tests/test_docs_site.py, uses it)."""
from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from orchestrator.docs import katex


def write_archive(path: Path, names: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name in names:
            data = f"/* {name} */".encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


DIST = ["package/dist/katex.min.js", "package/dist/katex.min.css", "package/dist/contrib/auto-render.min.js",
        "package/dist/fonts/KaTeX_Main-Regular.woff2", "package/LICENSE"]


def test_an_archive_that_is_not_the_pinned_one_is_refused_in_one_line_with_nothing_kept(tmp_path, capsys):
    archive = write_archive(tmp_path / "in" / katex.ARCHIVE, DIST)
    dest = tmp_path / "katex"
    assert katex.main([str(dest), "--archive", str(archive)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and f"not the pinned {katex.WHAT}'s" in err
    assert not dest.exists()


def test_only_katex_s_dist_files_and_licence_are_kept(tmp_path, monkeypatch):
    archive = write_archive(tmp_path / "in" / katex.ARCHIVE, DIST + [
        "package/dist/katex.js", "package/dist/fonts/KaTeX_Main-Regular.ttf", "package/src/katex.js",
        "package/dist/contrib/copy-tex.min.js", "package/package.json"])
    monkeypatch.setattr(katex, "SHA256", hashlib.sha256(archive.read_bytes()).hexdigest())
    dest = tmp_path / "katex"
    assert katex.install(dest, archive) == len(DIST)
    kept = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert kept == ["LICENSE", "contrib/auto-render.min.js", "fonts/KaTeX_Main-Regular.woff2", "katex.min.css",
                    "katex.min.js"]
    assert katex.installed(dest)


def test_an_archive_without_katex_s_files_is_refused(tmp_path, monkeypatch):
    archive = write_archive(tmp_path / "in" / katex.ARCHIVE, ["package/dist/katex.min.js", "package/LICENSE"])
    monkeypatch.setattr(katex, "SHA256", hashlib.sha256(archive.read_bytes()).hexdigest())
    with pytest.raises(katex.InstallError, match="not KaTeX's dist"):
        katex.install(tmp_path / "katex", archive)
    assert not (tmp_path / "katex").exists()
