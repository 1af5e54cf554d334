"""Character offsets of generated tokens in their decoded text (SPEC §3, §4.2: milestones are
mapped to the generated tokens, never by re-tokenising text)."""

from __future__ import annotations

from typing import Sequence


def decode_with_offsets(tokenizer, ids: Sequence[int], window: int = 8) -> tuple[str, list[tuple[int, int]]]:
    """Decode ``ids`` (special tokens skipped) and return the text with the (start, end) span
    of every token in it; special tokens and bytes of a character split across tokens get
    empty or shared spans so that the spans tile the text in order.

    Each token's text is found by decoding a short window before it with and without the
    token; a final check against the full decode falls back to exact prefix decoding when
    the windowed pass disagrees (rare tokenizers whose decoding is not local).
    """
    ids = [int(i) for i in ids]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    offsets = _windowed(tokenizer, ids, window)
    if offsets is None or (offsets and offsets[-1][1] != len(text)):
        offsets = _prefix(tokenizer, ids)
    return text, offsets


def _spans(ends: list[int]) -> list[tuple[int, int]]:
    spans, start = [], 0
    for end in ends:
        end = max(end, start)
        spans.append((start, end))
        start = end
    return spans


def _windowed(tokenizer, ids: list[int], window: int):
    decode = lambda part: tokenizer.decode(part, skip_special_tokens=True)  # noqa: E731
    ends, pos = [], 0
    for k in range(len(ids)):
        lo = max(0, k - window)
        before, after = decode(ids[lo:k]), decode(ids[lo : k + 1])
        if not after.startswith(before.rstrip("\ufffd")):
            return None
        # a trailing replacement char is an incomplete UTF-8 sequence: it is not text yet
        stable_before = len(before.rstrip("\ufffd"))
        stable_after = len(after.rstrip("\ufffd"))
        pos += stable_after - stable_before
        ends.append(pos)
    return _spans(ends)


def _prefix(tokenizer, ids: list[int]) -> list[tuple[int, int]]:
    ends = []
    for k in range(len(ids)):
        ends.append(len(tokenizer.decode(ids[: k + 1], skip_special_tokens=True).rstrip("\ufffd")))
    return _spans(ends)
