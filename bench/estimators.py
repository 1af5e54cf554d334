"""Speed and memory of the estimators' ``token_advantages`` (SPEC §12, issue: estimators).

    python bench/estimators.py                      # G16·T256·H576 and G32·T4096·H1536
    python bench/estimators.py --full               # + G 8/16/32 x T 512..4096 at H 576
    python bench/estimators.py --grid 16:2048,32:4096:1536
    python bench/estimators.py --lengths            # G16·H576 at T 128, 256, ..., 8192 (the cost table)

For every (G, T, H) it prints the interval and stride the default profile's structure rule
resolves to, the wall time and peak extra memory (RSS on CPU, allocator peak on CUDA) of
Hista's default profile and of its paper profile (interval 50, stride 5) on one random group,
their ratio, the *floor* (a bare ``torch.cdist`` over every rollout pair of hidden states
compressed at the default's stride, which any exact MinDistance computation must at least
do), the blend of Hista and Numca (docs/estimators.md "Blend"), the probe (data, fit and
advantages of one group), numca and grpo. With ``--full`` it
ends with the scaling exponent of Hista's time in T (least squares on log time vs log T per G).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import math
import os
import threading
import time

import torch
from arguments import POSITIVE, comma_list, device, grid_cell

from hista.estimators import get
from hista.types import Rollout, RolloutGroup

PROMPT = 64


def make_group(G: int, T: int, H: int, seed: int = 0, device: str = "cpu") -> RolloutGroup:
    """A random group: smooth random-walk hidden states, numbers every ~25 tokens, 0/1 rewards."""
    g = torch.Generator().manual_seed(seed)
    prompt_ids = list(range(1, PROMPT + 1))
    prompt_h = torch.randn(PROMPT, H, generator=g)
    rollouts = []
    for _ in range(G):
        steps = torch.randn(T, H, generator=g) * 0.3
        hidden = torch.cat([prompt_h, prompt_h[-1] + steps.cumsum(0)]).to(device)
        words = [str(int(torch.randint(0, 100, (1,), generator=g))) if k % 25 == 24 else "w" for k in range(T)]
        text, offsets = "", []
        for w in words:
            offsets.append((len(text), len(text) + len(w) + 1))
            text += w + " "
        rollouts.append(Rollout(prompt_ids, list(range(T)), float(torch.rand(1, generator=g) < 0.5),
                                completion_text=text, offsets=offsets, hidden=hidden))
    return RolloutGroup(rollouts, prompt_id=f"bench-{G}-{T}")


class PeakMemory:
    """Peak extra memory during a block: CUDA allocator peak, or RSS sampled every ms."""

    def __init__(self, device: str):
        self.device, self.peak = device, 0

    def _rss(self) -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def __enter__(self):
        gc.collect()
        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
            return self
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except OSError:
            pass
        self.base, self.high, self.running = self._rss(), self._rss(), True
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()
        return self

    def _poll(self):
        while self.running:
            self.high = max(self.high, self._rss())
            time.sleep(0.001)

    def __exit__(self, *exc):
        if self.device == "cuda":
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated() - self.base
        else:
            self.running = False
            self.thread.join()
            self.peak = max(self.high, self._rss()) - self.base


def timed(fn, device: str, repeat: int):
    best, peak = math.inf, 0
    for _ in range(repeat):
        with PeakMemory(device) as mem:
            start = time.perf_counter()
            fn()
            if device == "cuda":
                torch.cuda.synchronize()
            best = min(best, time.perf_counter() - start)
        peak = max(peak, mem.peak)
    return best, peak


def floor(group: RolloutGroup, stride: int) -> None:
    """Bare pairwise distances between compressed hidden states of every rollout pair, one
    query rollout against all G at a time (the bench's rollouts all have the same length)."""
    comp = torch.stack([r.hidden[::stride] for r in group.rollouts])
    for query in comp:
        torch.cdist(query.expand_as(comp), comp)


def probe_step(probe, group: RolloutGroup, other: RolloutGroup) -> None:
    """What the probe costs per group in training: its data (sufficient statistics), a fit on
    another group's data, the fitted probe's advantages."""
    probe.fitted(probe.data(other)).token_advantages(group)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="G 8/16/32 x T 512..4096 at H 576, and the default cells")
    ap.add_argument("--grid", type=comma_list(grid_cell), default=None,
                    help="comma list of G:T[:H] cells, e.g. 16:2048,32:4096:1536")
    ap.add_argument("--lengths", action="store_true",
                    help="G 16 x T 128, 256, ..., 8192 at H 576: default, paper and floor across lengths")
    ap.add_argument("--device", type=device, default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeat", type=POSITIVE, default=2, help="best of N runs (default 2)")
    args = ap.parse_args()

    cells = [(16, 256, 576), (32, 4096, 1536)]
    if args.grid:
        cells = args.grid
    elif args.lengths:
        cells = [(16, 128 << k, 576) for k in range(7)]
    elif args.full:
        cells = [(G, T) for G in (8, 16, 32) for T in (512, 1024, 2048, 4096)] + cells
    cells = [c if len(c) == 3 else (*c, 576) for c in cells]
    hista, paper, probe = get("hista"), get("hista", profile="paper"), get("probe")
    numca, grpo, blend = get("numca"), get("grpo"), get("blend")
    print(f"device {args.device}, torch threads {torch.get_num_threads()}, best of {args.repeat}; "
          f"time in s, peak extra memory in MiB; P = {PROMPT}")
    head = (f"{'G':>3s} {'T':>5s} {'H':>5s} | {'interval':>8s} {'stride':>6s} | {'hista':>8s} {'MiB':>6s} | "
            f"{'paper':>8s} {'MiB':>6s} | {'hista/paper':>11s} | {'floor':>7s} {'hista/floor':>11s} | {'blend':>8s} | "
            f"{'probe':>7s} {'MiB':>5s} | {'numca':>7s} | {'grpo':>7s}")
    print(head)
    times: dict[int, list[tuple[int, float]]] = {}
    for G, T, H in cells:
        group = make_group(G, T, H, device=args.device)
        other = make_group(G, T, H, seed=1, device=args.device)
        interval, stride = hista.structure(group.rollouts)
        t_h, m_h = timed(lambda g=group: hista.token_advantages(g), args.device, args.repeat)
        t_p, m_p = timed(lambda g=group: paper.token_advantages(g), args.device, args.repeat)
        t_f, _ = timed(lambda g=group, s=stride: floor(g, s), args.device, args.repeat)
        t_b, _ = timed(lambda g=group: blend.token_advantages(g), args.device, args.repeat)
        t_q, m_q = timed(lambda g=group, o=other: probe_step(probe, g, o), args.device, args.repeat)
        t_n, _ = timed(lambda g=group: numca.token_advantages(g), args.device, args.repeat)
        t_g, _ = timed(lambda g=group: grpo.token_advantages(g), args.device, args.repeat)
        line = (f"{G:3d} {T:5d} {H:5d} | {interval:8d} {stride:6d} | {t_h:8.3f} {m_h / 2**20:6.0f} | "
                f"{t_p:8.3f} {m_p / 2**20:6.0f} | {t_h / t_p:10.2f}x | {t_f:7.3f} {t_h / t_f:10.2f}x | {t_b:8.3f} | "
                f"{t_q:7.3f} {m_q / 2**20:5.0f} | {t_n:7.3f} | {t_g:7.4f}")
        print(line, flush=True)
        del group, other
        if H == 576 and args.full:
            times.setdefault(G, []).append((T, t_h))
    for G, pts in times.items():
        if len(pts) >= 2:
            xs = [math.log(t) for t, _ in pts]
            ys = [math.log(s) for _, s in pts]
            mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
            slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
            print(f"hista time ~ T^{slope:.2f} at G={G} (T {pts[0][0]}..{pts[-1][0]})")


if __name__ == "__main__":
    main()
