"""The order in which a training run draws its prompts, as a function of (seed, epoch) alone
(SPEC §9: a resumed run draws what an uninterrupted one drew, at any step).

TRL's ``RepeatSampler`` shuffles with a generator seeded once, when the trainer is built, and
draws one permutation per pass: epoch e gets the (e + 1)-th permutation. A resumed trainer is
built afresh and transformers no longer replays the epochs it skips, so a run resumed in epoch
e ≥ 1 drew epoch 0's order again. :class:`EpochSampler` draws the same permutations, but
computes epoch e's from the seed and e (transformers and accelerate call ``set_epoch`` before
every pass, and a resumed epoch skips its first batches from that epoch's order), so an
uninterrupted run keeps TRL's order and a resumed one continues it.
"""

from __future__ import annotations

import torch
from trl.trainer.utils import RepeatSampler


def epoch_order(size: int, seed: int, epoch: int) -> list[int]:
    """The shuffled order of ``size`` prompts in ``epoch``: the (epoch + 1)-th
    permutation drawn by a generator seeded with ``seed``, which is the order TRL's
    ``RepeatSampler`` gives epoch ``epoch`` of an uninterrupted run."""
    generator = torch.Generator()
    generator.manual_seed(seed)
    for _ in range(epoch):
        torch.randperm(size, generator=generator)
    return torch.randperm(size, generator=generator).tolist()


class EpochSampler(RepeatSampler):
    """TRL's ``RepeatSampler`` (each prompt ``mini_repeat_count`` times in a row, each chunk of
    ``batch_size`` prompts ``repeat_count`` times, incomplete chunks dropped) whose shuffled
    order is :func:`epoch_order` of the epoch ``set_epoch`` named."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next pass draws (called by the trainer's data loader before each)."""
        self.epoch = int(epoch)

    def __iter__(self):
        if self.shuffle:
            order = epoch_order(self.num_samples, self.seed, self.epoch)
        else:
            order = list(range(self.num_samples))
        chunks = [order[i: i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        for chunk in chunks:
            if len(chunk) < self.batch_size:
                continue
            for _ in range(self.repeat_count):
                for index in chunk:
                    yield from [index] * self.mini_repeat_count
