"""``lightning_fed.allocator``: glibc keeps freed blocks for reuse, unless the user set its knobs."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from lightning_fed.allocator import USER_MALLOC_ENV, keep_freed_memory

#: Prints whether a 64 MiB tensor's memory lies in the process's ``[heap]`` (brk) region.
PROBE = """
import sys
import torch
if sys.argv[1] == "keep":
    from lightning_fed.allocator import keep_freed_memory
    assert keep_freed_memory().applied
block = torch.empty(16 * 2**20)  # 64 MiB of float32: above glibc's largest mmap threshold
address = block.data_ptr()
with open("/proc/self/maps") as maps:
    heap = [line.split()[0] for line in maps if line.rstrip().endswith("[heap]")]
inside = any(int(lo, 16) <= address < int(hi, 16) for lo, hi in (r.split("-") for r in heap))
print(inside)
"""


def _in_heap(mode: str) -> bool:
    env = {k: v for k, v in os.environ.items() if k not in USER_MALLOC_ENV}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode], env=env, capture_output=True, text=True, check=True, timeout=120
    )
    return done.stdout.strip().splitlines()[-1] == "True"


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only"
)
def test_a_large_block_comes_from_the_heap_that_keeps_freed_memory() -> None:
    """glibc's default serves a 64 MiB block as its own mapping (unmapped again on free, so the
    next one faults every page in); kept for reuse (``mmap`` off) it comes from the ``brk`` heap,
    whose freed blocks later allocations reuse."""
    assert not _in_heap("default")
    assert _in_heap("keep")


def test_the_users_malloc_setting_wins() -> None:
    choice = keep_freed_memory({"MALLOC_MMAP_MAX_": "65536"})
    assert not choice.applied
    assert choice.describe() == "memory: allocator left as it is (MALLOC_MMAP_MAX_ is set in the environment)"


def test_elsewhere_than_glibc_nothing_is_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    import lightning_fed.allocator as allocator

    monkeypatch.setattr(allocator, "_libc", lambda: None)
    choice = allocator.keep_freed_memory({})
    assert not choice.applied
    assert "not glibc on Linux" in choice.describe()
