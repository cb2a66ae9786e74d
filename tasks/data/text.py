"""Characters as token ids: LEAF's vocabulary of 80 characters (LEAF's `ALL_LETTERS`, its Shakespeare model's
input and output alphabet), used by the shakespeare, leaf_shakespeare and leaf_sent140 datasets alike.

A character outside the vocabulary becomes a space (LEAF's own preprocessing keeps only these characters).
"""
from __future__ import annotations

import numpy as np

LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
VOCAB_SIZE = len(LETTERS)  # 80
SPACE = LETTERS.index(" ")
_TABLE = np.full(256, SPACE, dtype=np.int64)  # every LEAF letter is ASCII; other code points clip to 255
_TABLE[[ord(c) for c in LETTERS]] = np.arange(VOCAB_SIZE)


def encode(text: str) -> np.ndarray:
    """Token ids (int64) of `text`, one per character."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    return _TABLE[np.minimum(codes, 255)]


def encode_fixed(text: str, length: int) -> np.ndarray:
    """The first `length` characters' ids, padded with spaces (a tweet as a fixed-length sequence)."""
    ids = encode(text[:length])
    return np.pad(ids, (0, length - len(ids)), constant_values=SPACE)


def windows(ids: np.ndarray, seq_len: int, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """LEAF's next-character samples: x = ids[s:s+seq_len], y = ids[s+seq_len], for s = 0, stride, 2·stride, …"""
    if len(ids) <= seq_len:
        return np.zeros((0, seq_len), np.int64), np.zeros(0, np.int64)
    starts = np.arange(0, len(ids) - seq_len, stride)
    view = np.lib.stride_tricks.sliding_window_view(ids, seq_len)
    return view[starts].copy(), ids[starts + seq_len].copy()
