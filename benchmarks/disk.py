"""The data disk's durable sequential write bandwidth: the reference for durable produce.

Two figures, because a virtual disk is often not one speed. This project's VM takes about
700 MB at ~1.6 GB/s, then drops to ~320 MB/s until it has been idle for ~30 s:
- burst: large writes, then one fsync (what the issue suggests);
- sustained: 1 MiB writes, each followed by fdatasync (the broker's pattern under load),
  until the total is written; the figure is the rate over the last quarter, so a burst
  allowance at the start does not count.
Both run last in the suite, so the burst they use up is not taken from another figure;
`settle` waits between sections that write a lot, so each starts with the disk rested.
"""

from __future__ import annotations

import os
import sys
import time

BLOCK = b"\0" * (1 << 20)


def burst_bandwidth(directory: str, total_bytes: int) -> float:
    """MB/s of 1 MiB writes followed by one fsync."""
    path = os.path.join(directory, "bandwidth.tmp")
    start = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(max(1, total_bytes >> 20)):
            f.write(BLOCK)
        f.flush()
        os.fsync(f.fileno())
    elapsed = time.perf_counter() - start
    os.remove(path)
    return max(1, total_bytes >> 20) * len(BLOCK) / elapsed / 1e6


def sustained_bandwidth(directory: str, total_bytes: int) -> float:
    """MB/s over the last quarter of `total_bytes` written as fdatasync'd 1 MiB appends."""
    path = os.path.join(directory, "sustained.tmp")
    blocks = max(4, total_bytes >> 20)
    timed_from = blocks - blocks // 4
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        start = time.perf_counter()
        for i in range(blocks):
            if i == timed_from:
                start = time.perf_counter()
            os.write(fd, BLOCK)
            os.fdatasync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.remove(path)
    return (blocks - timed_from) * len(BLOCK) / elapsed / 1e6


def settle(seconds: float) -> None:
    """Let the disk rest before a section that writes a lot (see the module docstring)."""
    if seconds > 0:
        print(f"bench: letting the disk rest {seconds:g} s", file=sys.stderr, flush=True)
        time.sleep(seconds)
