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
    return mixed(words, 1)


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
_MIX_L, _MIX_R, _POOL, _M32, _M63 = 0xCA01F9DD, 0x4973F715, 4, 0xFFFFFFFF, (1 << 63) - 1


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
PACKED_ROWS = 64  # up to this many rows, as lanes of one Python integer (below); NumPy's arrays above
LANE_BYTES = 12  # a lane holds a 32-bit word, its product by a 32-bit constant and a sum of two such products


def derive_seeds(rows: np.ndarray) -> list[int]:
    """derive_seed(*row) for every row of an [n, parts] integer array at once (parts ≤ 16), equal to SeedSequence
    bit for bit (tested): one SeedSequence per client costs ~25 µs, a tenth of a tiny client's whole update. The
    rows' words are mixed side by side, as lanes of one Python integer for a few tens of rows (each operation then
    costs a fraction of NumPy's per-call cost: 20 rows in 40 µs against 96 µs; benchmarks/README.md, "Tiny
    clients"), as uint64 arrays for more."""
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) <= PACKED_ROWS:
        columns = (rows & _M32).T.tolist()
        one = packed([1] * len(rows))
        return unpacked(mixed([packed(column) for column in columns], one), len(rows))
    words = (rows & _M32).astype(np.uint64)
    return mixed(list(words.T), 1).tolist()


def packed(values: list[int]) -> int:
    """Non-negative integers below 2**32, one per lane of LANE_BYTES bytes, the first lowest."""
    return int.from_bytes(b"".join(v.to_bytes(LANE_BYTES, "little") for v in values), "little")


def unpacked(lanes: int, count: int) -> list[int]:
    """The low 63 bits of each of `count` lanes (a lane's higher bits hold what `mixed`'s last shift moved in)."""
    data = lanes.to_bytes(LANE_BYTES * count + 1, "little")
    return [int.from_bytes(data[i:i + 8], "little") & _M63 for i in range(0, LANE_BYTES * count, LANE_BYTES)]


def mixed(words: list, one):
    """SeedSequence's mixing (an entropy pool of 4 words, 2 uint64 words of state) of `words`, each a uint32, into
    the first state word halved: a 63-bit seed. A word is a Python integer (`one` = 1), a column of uint64 arrays
    (`one` = 1: NumPy takes the constants at the arrays' type, wrapping as uint64 does), or a column packed as lanes
    of one Python integer (`one`: 1 in every lane, so that `c * one` is constant c in every lane). Every value
    stays below 2**65 in its lane: a subtraction is written as an addition, a right shift masked, so that nothing
    crosses into a neighbouring lane."""
    constants = iter(_HASH_A)
    mask = _M32 * one

    def hashmix(value, pairs=constants):  # the next pair of `pairs` hashes `value`
        xor, mult = next(pairs)
        value = ((value ^ xor * one) * mult) & mask
        return value ^ (value >> 16 & mask)

    def mix(x, y):  # (L·x − R·y) mod 2**32, with −y as 2**32 − y = (mask − y) + 1
        result = (_MIX_L * x + _MIX_R * (mask - y + one)) & mask
        return result ^ (result >> 16 & mask)

    pool = [hashmix(words[i] if i < len(words) else 0 * one) for i in range(_POOL)]
    for src in range(_POOL):
        for dst in range(_POOL):
            if src != dst:
                pool[dst] = mix(pool[dst], hashmix(pool[src]))
    for src in range(_POOL, len(words)):
        for dst in range(_POOL):
            pool[dst] = mix(pool[dst], hashmix(words[src]))
    # generate_state(2, uint64): the first two uint32 words
    state_pairs = iter(_HASH_B)
    low, high = (hashmix(word, state_pairs) for word in pool[:2])
    return ((high << 32) | low) >> 1
