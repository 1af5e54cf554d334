"""The bootstrap that SVEB's and ``hista eval``'s intervals share: the means of
resamples drawn with replacement, of entries or of whole clusters (entries with equal labels), in
chunks that bound memory.
Seeding and the interval read from the means are the caller's."""

from __future__ import annotations

from typing import Hashable, Optional, Sequence

import numpy as np

#: Resampled indices are drawn in chunks of at most this many, to bound memory.
CHUNK_ELEMENTS = 1 << 20


def resampled_means(values: np.ndarray, n_boot: int, rng: np.random.Generator,
                    sizes: Optional[np.ndarray] = None) -> np.ndarray:
    """The statistic of ``n_boot`` resamples, each drawing k indices with replacement from ``rng``
    (k = ``values.size``): the mean of the drawn ``values``, or, given cluster ``sizes``
    (``values`` then the clusters' sums), the sum of the drawn clusters' sums over the sum of
    their sizes, i.e. the mean over every entry of the drawn clusters."""
    k = values.size
    means = np.empty(n_boot, dtype=np.float64)
    rows = max(1, CHUNK_ELEMENTS // k)
    for start in range(0, n_boot, rows):
        stop = min(n_boot, start + rows)
        idx = rng.integers(0, k, size=(stop - start, k))
        drawn = values[idx]
        means[start:stop] = drawn.mean(axis=1) if sizes is None else drawn.sum(axis=1) / sizes[idx].sum(axis=1)
    return means


def clustered_means(values: np.ndarray, labels: Optional[Sequence[Hashable]], n_boot: int,
                    rng: np.random.Generator) -> np.ndarray:
    """The statistic of ``n_boot`` resamples of ``values`` (:func:`resampled_means`): of whole
    clusters when a label of ``labels`` (one per entry) repeats, the clusters numbered in order
    of first appearance; else, or without labels, of the entries, from the same random stream,
    so that labels that never repeat give the same means bit for bit."""
    if labels is not None:
        if len(labels) != values.size:
            raise ValueError(f"{len(labels)} cluster labels for {values.size} entries")
        number: dict[Hashable, int] = {}  # cluster label -> its index, in order of first appearance
        which = [number.setdefault(label, len(number)) for label in labels]
        if len(number) < len(which):
            return resampled_means(np.bincount(which, weights=values), n_boot, rng, sizes=np.bincount(which))
    return resampled_means(values, n_boot, rng)
