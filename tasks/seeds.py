"""Every random draw's seed, from (run seed, round, client id, stream): the same wherever and whenever it is
computed, so results never depend on which process or actor draws. Imports nothing else of Mooring."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from (run seed, round, client id, ...): the same wherever and whenever it is computed. It is
    numpy's SeedSequence(parts) (each part's low 32 bits) and its first uint64 word, halved (tested equal), worked
    out in Python's integers: a SeedSequence object costs ~25 µs, a tiny round's draw several times over."""
    words = [int(p) & _M32 for p in parts]
    if len(words) > MAX_PARTS:
        return int(np.random.SeedSequence(words).generate_state(2, np.uint64)[0] >> 1)
    return mixed(words, 0)


def seeded_generator(*parts: int) -> torch.Generator:
    return torch.Generator().manual_seed(derive_seed(*parts))


@contextmanager
def torch_seeded(seed: int) -> Iterator[None]:
    """torch's global generator seeded with `seed` inside the block and put back after it: a module built inside
    has the same weights in every process, and no draw outside the block moves."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


# numpy's SeedSequence constants (numpy/random/bit_generator.pyx), as Python integers: they work on Python integers
# and, numpy taking them at its arrays' type, on uint64 arrays alike
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R, _POOL, _M32 = 0xCA01F9DD, 0x4973F715, 4, 0xFFFFFFFF


def _constant_pairs(init: int, mult: int, count: int) -> list[tuple[int, int]]:
    """SeedSequence's hash constants in the order its calls use them: (the one XORed in, the multiplier after)."""
    pairs, const = [], init
    for _ in range(count):
        following = (const * mult) & 0xFFFFFFFF
        pairs.append((const, following))
        const = following
    return pairs


# a row of `parts` words takes 4 + 12 + 4·max(0, parts − 4) hashes: 64 cover rows of up to 16 parts
MAX_PARTS = 16
_HASH_A = _constant_pairs(_INIT_A, _MULT_A, 64)
_HASH_B = _constant_pairs(_INIT_B, _MULT_B, 2)
SMALL_BATCH = 16  # up to this many rows, one row at a time in Python's integers beats numpy's per-call cost


def derive_seeds(rows: np.ndarray) -> list[int]:
    """derive_seed(*row) for every row of an [n, parts] integer array at once (parts ≤ 16): SeedSequence's mixing
    over arrays, since one SeedSequence per client costs ~25 µs, a tenth of a tiny client's whole update; a few
    rows one at a time. Equal to SeedSequence bit for bit (tested)."""
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) <= SMALL_BATCH:
        return [derive_seed(*row) for row in rows.tolist()]
    words = (rows & _M32).astype(np.uint64)
    return mixed(list(words.T), np.zeros(len(rows), dtype=np.uint64)).tolist()


def mixed(words: list, zero):
    """SeedSequence's mixing (an entropy pool of 4 words, 2 uint64 words of state) of `words`, each a uint32 as a
    Python integer or a column of them as a uint64 array (`zero` of the same kind), into the first state word
    halved: a 63-bit seed, or an array of them."""
    constants = iter(_HASH_A)

    def hashmix(value):
        xor, mult = next(constants)
        value = ((value ^ xor) * mult) & _M32
        return value ^ (value >> 16)

    def mix(x, y):
        result = (_MIX_L * x - _MIX_R * y) & _M32
        return result ^ (result >> 16)

    pool = [hashmix(words[i] if i < len(words) else zero) for i in range(_POOL)]
    for src in range(_POOL):
        for dst in range(_POOL):
            if src != dst:
                pool[dst] = mix(pool[dst], hashmix(pool[src]))
    for src in range(_POOL, len(words)):
        for dst in range(_POOL):
            pool[dst] = mix(pool[dst], hashmix(words[src]))
    state = []
    for word, (xor, mult) in zip(pool[:2], _HASH_B):  # generate_state(2, uint64): the first two uint32 words
        value = ((word ^ xor) * mult) & _M32
        state.append(value ^ (value >> 16))
    return ((state[1] << 32) | state[0]) >> 1
