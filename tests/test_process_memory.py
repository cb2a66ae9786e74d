"""The allocator setting of Mooring's computing processes (orchestrator/process_memory.py), in fresh processes: a
freed block of megabytes is kept for reuse rather than given back to the system, and the user's own glibc setting
is left alone."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                                reason="the setting is glibc's malloc's; this C library is not glibc")

# prints: whether the setting applied, and how many bytes the resident set shrank by when a 16 MiB tensor was freed
FREE_A_BLOCK = """
import os, sys, torch
from orchestrator.process_memory import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else False
def resident():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
block = torch.ones(4 * 2**20)  # 16 MiB, every page written
before = resident()
del block
print(applied, before - resident())
"""
MIB = 2**20


def free_a_block(mode: str, env: dict[str, str] | None = None) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", FREE_A_BLOCK, mode], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1], env={**os.environ, **(env or {})})
    applied, shrank = out.stdout.split()
    return applied == "True", int(shrank)


def test_a_freed_block_of_megabytes_is_given_back_by_default_and_kept_with_the_setting():
    assert free_a_block("default") == (False, pytest.approx(16 * MIB, abs=4 * MIB))
    applied, shrank = free_a_block("keep")
    assert applied and shrank < 4 * MIB


def test_the_users_own_malloc_thresholds_are_left_as_they_are():
    applied, shrank = free_a_block("keep", {"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)})
    assert not applied and shrank == pytest.approx(16 * MIB, abs=4 * MIB)
