"""Splitting a long job over machines and seeding its parts: a job that processes
its items in fixed chunks (an SVEB build's problems, an evaluation's batches) can be cut into N
shards, shard K taking every N-th chunk from K-1 (round robin, so that the parts take about
equally long), and each chunk's seed depends only on the job's seed and the chunk's own names,
so a part computes exactly what the whole job computes for its chunks."""

from __future__ import annotations

import re
import zlib

from .errors import InputError


def parse(text: str) -> tuple[int, int]:
    """``"K/N"`` as (K, N) with 1 <= K <= N, or an InputError naming ``--shard``."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise InputError(f"expected K/N with 1 <= K <= N (e.g. 2/8), got {text!r}", field="--shard")
    return int(match[1]), int(match[2])


def chunks_of(count: int, shard: tuple[int, int]) -> list[int]:
    """The indices of the chunks (of ``count``) that shard (K, N) processes: every N-th from
    K-1."""
    k, n = shard
    return list(range(k - 1, count, n))


def derive_seed(*parts: object) -> int:
    """A 31-bit seed from a job's seed and names (stable across runs, machines and
    platforms; a CRC-32 of the parts joined by ``:``)."""
    return zlib.crc32(":".join(str(p) for p in parts).encode()) & 0x7FFFFFFF
