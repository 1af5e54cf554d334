"""Keep freed memory for reuse while decoding on CPU.

A decode step allocates and frees tensors of megabytes: the logits [B, V] (12.6 MB at batch
64 with a 49k vocabulary) and the temporaries of choosing a token from them, the activations
of every layer, the scores of attention. With glibc's default settings freed memory at the top of
the heap goes back to the system and blocks larger than a moving threshold come from fresh
``mmap`` pages, so the next step touches new pages and pays a page fault for every 4 KiB of
them: measured on 2 cores, choosing the tokens of 64 rows took 7-13 ms of a 110 ms step, and
about 3 ms with freed memory kept. This is the page-fault cost for which PyTorch's CPU performance
guides recommend jemalloc or tcmalloc; glibc's own ``mallopt`` reaches the same without another
library: blocks up to 32 MiB (glibc's largest threshold) come from the heap, and freed heap
memory stays with the process for the next step. Both settings are process-wide and only
change where memory comes from: no value computed changes, and the process's peak memory is
the same (memory freed late in a run is not returned before the process ends)."""

from __future__ import annotations

import ctypes
import platform

#: glibc's mallopt parameters and the values set
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD, TRIM_THRESHOLD = 32 << 20, 2**31 - 1

_kept = False


def keep_freed_memory() -> bool:
    """Make glibc's allocator reuse freed memory instead of returning it to the system (module
    docstring): blocks up to 32 MiB from the heap, no trimming of its top. Once per
    process; True when set (or set before), False where the C library is not glibc or refuses."""
    global _kept
    if not _kept and platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        try:
            libc = ctypes.CDLL("libc.so.6")
        except OSError:
            return False
        _kept = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) & bool(libc.mallopt(M_TRIM_THRESHOLD,
                                                                                       TRIM_THRESHOLD))
    return _kept
