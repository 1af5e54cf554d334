"""Token offsets in linear time (issue 41 item 2; SPEC §3, §7): ``decode_with_offsets`` on
64k adversarial token ids costs < 0.1 s of CPU time, its spans are the ones the windowed
decoder of a695632 gave on normal text, and they tile the decoded text whatever the bytes.

Times are ``time.process_time`` (best of 3), as in ``tests/reliability/test_linear_time.py``; the
per-tokenizer cache of token bytes is filled by a first, untimed call (a one-off cost per
tokenizer and process, measured in results/issue-41/linear-time.md). As math-verify there, the
tokenizer's own ``decode`` (third-party, and what a695632 paid too) is timed apart and not
counted as hista's. The budget is ``LIMIT_S`` per 64k characters of decoded text: 64k random
ids of the embedded tokenizer decode to some 440k characters. An input over the budget gets the
second look of ``test_linear_time.py`` (at most ``GROWTH`` times its first quarter, never over
ten times the budget) instead of failing on a slow machine.
"""

from __future__ import annotations

import itertools
import random
import time

import pytest
from cputime import CpuClock

from hista.rollout import decode_with_offsets
from hista.rollout import offsets as offsets_module

pytestmark = pytest.mark.xdist_group("timing")  # the CPU-time tests take turns on one worker (tests/conftest.py)

N = 65536
LIMIT_S = 0.1
GUARD_S = 10.0
#: how much more an input over the budget may cost than its first quarter (linear: 4); the
#: second look of tests/reliability/test_linear_time.py, for a machine slower than the budget's
GROWTH = 6.0


# --------------------------------------------------------------------------- tokenizers


@pytest.fixture(scope="module")
def embedded_tokenizer():
    from hista.models import load

    return load("smollm2-135m-instruct", device="cpu", weights=False).tokenizer


@pytest.fixture(scope="module", params=["tiny", "smollm2-135m-instruct"])
def tok(request, tiny):
    return tiny.tokenizer if request.param == "tiny" else request.getfixturevalue("embedded_tokenizer")


def _byte_level_id(tok, byte: int) -> int:
    char = {b: c for c, b in offsets_module.BYTE_LEVEL_CHARS.items()}[byte]
    return tok.backend_tokenizer.token_to_id(char)


def _encode(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def _llama_like(decoder: str):
    """A small sentencepiece-style BPE with byte fallback (Llama 2, Mistral, Gemma layout):
    ``<0xNN>`` tokens for every byte, ``▁`` for spaces, and one of their decoders."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
    for c in "▁abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,;:!?'\"()[]{}+-*/=\\_\n\t":
        vocab.setdefault(c, len(vocab))
    merges = [("▁", "t"), ("h", "e"), ("▁t", "he"), ("▁", "a"), ("i", "n"), ("▁", "1")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    backend = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    if decoder == "llama":
        backend.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                             decoders.Strip(" ", 1, 0)])
    elif decoder == "gemma":
        backend.normalizer = normalizers.Replace(" ", "▁")
        backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    else:  # metaspace
        backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
        backend.decoder = decoders.Sequence([decoders.Metaspace(replacement="▁", prepend_scheme="always"),
                                             decoders.ByteFallback(), decoders.Fuse()])
    backend.add_special_tokens(["<unk>", "<s>", "</s>"])
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


@pytest.fixture(scope="module", params=["llama", "gemma", "metaspace"])
def sp_tok(request):
    return _llama_like(request.param)


class DecodeOnly:
    """A tokenizer seen only through ``decode`` (not emulated: the windowed pass), counting
    the ids it is asked to decode."""

    def __init__(self, tok):
        self.tok, self.calls, self.ids = tok, 0, 0

    def decode(self, ids, **kwargs):
        self.calls += 1
        self.ids += len(ids)
        return self.tok.decode(ids, **kwargs)


# --------------------------------------------------------------------------- references


def _before(tokenizer, ids, window=8):
    """``decode_with_offsets`` as of a695632 (quadratic on some inputs; short inputs only)."""
    ids = [int(i) for i in ids]
    decode = lambda part: tokenizer.decode(part, skip_special_tokens=True)  # noqa: E731
    text = decode(ids)

    def spans(ends):
        out, start = [], 0
        for end in ends:
            end = max(end, start)
            out.append((start, end))
            start = end
        return out

    ends, pos, offsets = [], 0, None
    for k in range(len(ids)):
        lo = max(0, k - window)
        before, after = decode(ids[lo:k]), decode(ids[lo : k + 1])
        if not after.startswith(before.rstrip("\ufffd")):
            break
        pos += len(after.rstrip("\ufffd")) - len(before.rstrip("\ufffd"))
        ends.append(pos)
    else:
        offsets = spans(ends)
    if offsets is None or (offsets and offsets[-1][1] != len(text)):
        offsets = spans([len(decode(ids[: k + 1]).rstrip("\ufffd")) for k in range(len(ids))])
    return text, offsets


_COMPLETIONS = [bytes(x) for n in (1, 2, 3) for x in itertools.product([0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF], repeat=n)]


def _complete_chars(prefix: bytes) -> int:
    """Characters of ``prefix.decode('utf-8', 'replace')`` that later bytes cannot change: all
    but a trailing U+FFFD that stands for a proper prefix of a valid character."""
    text = prefix.decode("utf-8", "replace")
    if text.endswith("\ufffd"):
        for more in _COMPLETIONS:
            longer = (prefix + more).decode("utf-8", "replace")
            if len(longer) == len(text) and longer[:-1] == text[:-1] and longer[-1] != "\ufffd":
                return len(text) - 1
    return len(text)


def _reference_ends(chunks: list[bytes]) -> list[int]:
    """Token ends by definition: a token ends after the characters its bytes complete; an
    incomplete sequence at the very end belongs to the last token with bytes."""
    data = b"".join(chunks)
    ends = [_complete_chars(data[:cut]) for cut in itertools.accumulate(map(len, chunks))]
    last = max([k for k, chunk in enumerate(chunks) if chunk] or [0])
    total = len(data.decode("utf-8", "replace"))
    return ends[:last] + [total] * (len(chunks) - last)


def _assert_tiles(tokenizer, ids, text, offsets):
    assert text == tokenizer.decode(ids, skip_special_tokens=True)
    assert len(offsets) == len(ids)
    if ids:
        assert offsets[0][0] == 0 and offsets[-1][1] == len(text)
    assert all(s <= e for s, e in offsets)
    assert all(a[1] == b[0] for a, b in zip(offsets, offsets[1:]))


_TEXTS = [
    "Tom has 12 apples; 12 + 5 = 17, so \\boxed{17}. Ünïcode → 答案 🎉 done",
    "Привет, мир! Γειά σου Κόσμε. こんにちは世界。 안녕하세요 🌍🚀👩‍👩‍👧‍👦 नमस्ते दुनिया مرحبا بالعالم",
    "def f(x):\n    return x ** 2  # ∑ ∫ √ ≤ ≥ ≠ ∞\n\n\tprint('€£¥₹ \u200b\u00ad')  \r\n",
]


def _normal_samples(tok, rng: random.Random, count: int):
    """Random token ids, slices of multilingual text and emoji, the same with characters split
    into byte tokens, and special tokens in between."""
    specials = sorted(set(tok.all_special_ids) | {0, 1, 2, 3, 16})
    for _ in range(count):
        kind = rng.random()
        if kind < 0.35:
            yield [rng.randrange(len(tok)) for _ in range(rng.randrange(1, 70))]
            continue
        text = rng.choice(_TEXTS) * 2
        start = rng.randrange(len(text))
        text = text[start : start + rng.randrange(1, 80)]
        if kind < 0.6:
            yield _encode(tok, text)
            continue
        ids = []
        for char in text:
            if ord(char) > 127 and rng.random() < 0.6:
                ids += [_byte_level_id(tok, b) for b in char.encode()]
            else:
                ids += _encode(tok, char)
            if rng.random() < 0.08:
                ids.insert(rng.randrange(len(ids) + 1), rng.choice(specials))
        yield ids


# --------------------------------------------------------------------------- behaviour


def test_same_offsets_as_before_on_normal_text(tok):
    """On every sample whose text holds no U+FFFD the offsets equal a695632's, and the
    emulated decoder (not the windowed pass) produced them."""
    rng = random.Random(41)
    compared = 0
    for ids in _normal_samples(tok, rng, 400):
        text, offsets = decode_with_offsets(tok, ids)
        _assert_tiles(tok, ids, text, offsets)
        assert offsets_module.emulated_offsets(tok, ids, text) == offsets
        if "\ufffd" not in text:
            compared += 1
            assert (text, offsets) == _before(tok, ids), ids
    assert compared > 300


def test_spans_are_the_characters_each_token_completes(tok):
    """Any bytes, valid or not (random byte tokens, lone continuation and lead bytes, the
    replacement character, truncated characters, specials between): the spans tile the text
    and each token holds the characters its bytes complete."""
    rng = random.Random(7)
    tokens = [b for b in range(256) if _byte_level_id(tok, b) is not None]  # SmolLM2 lacks 21 bytes
    pool = [0x41, 0x20, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC2, 0xDF, 0xE0, 0xE2, 0xED, 0xEF, 0xF0, 0xF4]
    fffd = _encode(tok, "\ufffd")
    for _ in range(400):
        ids = []
        for _ in range(rng.randrange(1, 30)):
            r = rng.random()
            if r < 0.75:
                ids.append(_byte_level_id(tok, rng.choice(pool) if rng.random() < 0.8 else rng.choice(tokens)))
            elif r < 0.85:
                ids += fffd
            elif r < 0.93:
                ids.append(rng.randrange(len(tok)))
            else:
                ids.append(tok.eos_token_id)
        text, offsets = decode_with_offsets(tok, ids)
        _assert_tiles(tok, ids, text, offsets)
        chunks = offsets_module.token_bytes(tok, ids)
        assert [e for _, e in offsets] == _reference_ends(chunks), ids


def test_invalid_bytes_examples(tok):
    b = lambda *values: [_byte_level_id(tok, v) for v in values]  # noqa: E731
    a, eos = _encode(tok, "a")[0], tok.eos_token_id
    cases = {
        (*b(0x80, 0x80), a): ("\ufffd\ufffda", [(0, 1), (1, 2), (2, 3)]),  # stray bytes: at once
        (*b(0xE2), a): ("\ufffda", [(0, 0), (0, 2)]),  # a truncated character: shown by the next byte
        (*b(0xE2, 0x82), eos): ("\ufffd", [(0, 0), (0, 1), (1, 1)]),  # truncated at the end
        tuple(b(*"🎉".encode())): ("🎉", [(0, 0), (0, 0), (0, 0), (0, 1)]),
        (*b(0xE2), eos, *b(0x82, 0xAC)): ("€", [(0, 0), (0, 0), (0, 0), (0, 1)]),  # specials vanish
        (*b(0xF0, 0x80), a): ("\ufffd\ufffda", [(0, 0), (0, 2), (2, 3)]),  # F0 80 is no prefix
        (*_encode(tok, "\ufffd") * 3,): ("\ufffd" * 3, [(0, 1), (1, 2), (2, 3)]),  # real U+FFFD
    }
    assert len(_encode(tok, "\ufffd")) == 1
    for ids, (want_text, want) in cases.items():
        assert decode_with_offsets(tok, list(ids)) == (want_text, want), ids
    assert decode_with_offsets(tok, []) == ("", [])
    assert decode_with_offsets(tok, [eos, eos]) == ("", [(0, 0), (0, 0)])
    out_of_vocab = len(tok) + 5  # a model's vocabulary can be larger than its tokenizer's
    text, offsets = decode_with_offsets(tok, [a, out_of_vocab, a])
    _assert_tiles(tok, [a, out_of_vocab, a], text, offsets)


def test_sentencepiece_byte_fallback(sp_tok):
    """Sentencepiece-style decoders (byte fallback, ``▁``, a stripped leading space) are
    emulated: the same offsets as a695632 on normal text, tiles on invalid byte runs."""
    rng = random.Random(3)
    vocab = len(sp_tok)
    for _ in range(300):
        if rng.random() < 0.5:
            text = rng.choice(_TEXTS)
            start = rng.randrange(len(text))
            ids = sp_tok(text[start : start + rng.randrange(1, 60)], add_special_tokens=False)["input_ids"]
            if rng.random() < 0.3:
                ids.insert(rng.randrange(len(ids) + 1), 2)
        else:
            ids = [rng.randrange(vocab) for _ in range(rng.randrange(1, 40))]
        text, offsets = decode_with_offsets(sp_tok, ids)
        _assert_tiles(sp_tok, ids, text, offsets)
        assert offsets_module.emulated_offsets(sp_tok, ids, text) == offsets, ids
        if "\ufffd" not in text:
            assert (text, offsets) == _before(sp_tok, ids), ids


def test_cleanup_of_tokenization_spaces_is_followed(tiny):
    """A tokenizer that cleans up spaces before punctuation (transformers'
    ``clean_up_tokenization``): the text is its decode, and each token keeps its own characters
    (a695632 gave ``'m`` to the quote and nothing to ``m``, ``'r`` to the quote of ``'re``)."""
    from hista.models.loading import tokenizer_for_tiny

    tok = tokenizer_for_tiny()
    tok.clean_up_tokenization_spaces = True
    tok.clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output = True
    text = "Yes , it is . I ' m sure they 're here ! Isn 't it ? x ' y"
    ids = _encode(tok, text) + [tok.eos_token_id] + _encode(tok, " ,a .")
    decoded, offsets = decode_with_offsets(tok, ids)
    assert decoded != tiny.tokenizer.decode(ids, skip_special_tokens=True)  # cleaned up
    _assert_tiles(tok, ids, decoded, offsets)
    assert offsets_module.emulated_offsets(tok, ids, decoded) == offsets
    assert decoded == "Yes, it is. I'm sure they're here! Isn 't it? x'y,a."
    assert [decoded[s:e] for s, e in offsets] == [
        "Yes", ",", " it", " is", ".", " I", "'", "m", " sure", " they", "'", "re", " here", "!", " Isn", " '",
        "t", " it", "?", " x", "'", "y", "", ",", "a", "."]


def test_added_tokens_after_first_use(tiny):
    """The per-tokenizer cache follows tokens added after a first decode."""
    from hista.models.loading import tokenizer_for_tiny

    tok = tokenizer_for_tiny()
    a = _encode(tok, "a")
    unknown = len(tok)
    text, offsets = decode_with_offsets(tok, a + [unknown] + a)
    assert text == "aa"
    tok.add_tokens(["<think>"])
    assert tok.convert_tokens_to_ids("<think>") == unknown
    text, offsets = decode_with_offsets(tok, a + [unknown] + a)
    assert text == "a<think>a" and offsets == [(0, 1), (1, 8), (8, 9)]


def test_windowed_pass_for_other_tokenizers(tiny):
    """A tokenizer that cannot be emulated gets the windowed pass: a695632's offsets on normal
    text, spans that tile on any bytes, and a bounded amount of decoding per token."""
    tok = tiny.tokenizer
    plain = DecodeOnly(tok)
    rng = random.Random(5)
    for ids in _normal_samples(tok, rng, 150):
        text, offsets = decode_with_offsets(plain, ids)
        _assert_tiles(tok, ids, text, offsets)
        if "\ufffd" not in text:
            assert (text, offsets) == _before(tok, ids), ids
    cont, a = _byte_level_id(tok, 0x80), _encode(tok, "a")[0]
    for ids in ([cont] * 2000, [_byte_level_id(tok, 0xE2), a] * 1000, _encode(tok, "\ufffd") * 700):
        plain.calls = plain.ids = 0
        text, offsets = decode_with_offsets(plain, ids)
        _assert_tiles(tok, ids, text, offsets)
        # the full decode, then about 1 + 1/8 decodes of at most 16 ids per token
        assert plain.calls <= 1 + 1.2 * len(ids) and plain.ids <= len(ids) + 16 * 1.2 * len(ids)


def test_short_non_local_decoders_fall_back_to_prefixes(tiny):
    """A decode that is not local (here: the text of a completion is reversed) cannot be read
    from windows: up to PREFIX_MAX_TOKENS tokens it is decoded prefix by prefix (exact, as
    before); longer ones keep spans that tile the text."""

    class Reversed(DecodeOnly):
        def decode(self, ids, **kwargs):
            return super().decode(ids, **kwargs)[::-1]

    tok = tiny.tokenizer
    ids = _encode(tok, "one two three four five six seven eight nine ten eleven twelve")
    text, offsets = decode_with_offsets(Reversed(tok), ids)
    assert (text, offsets) == _before(Reversed(tok), ids)
    ids = ids * (offsets_module.PREFIX_MAX_TOKENS // len(ids) + 1)
    reverse = Reversed(tok)
    text, offsets = decode_with_offsets(reverse, ids)
    assert text == tok.decode(ids)[::-1] and offsets[-1][1] == len(text)
    assert all(a[1] == b[0] and a[0] <= a[1] for a, b in zip(offsets, offsets[1:]))
    assert reverse.calls <= 1 + 1.2 * len(ids)


# --------------------------------------------------------------------------- timing


#: the timing tests' clock; the wrappers below add the excluded third-party time to it
CLOCK = CpuClock()


def _decode_excluded(monkeypatch, tokenizer):
    """The tokenizer's own decode of the whole completion (one per ``decode_with_offsets``)
    timed apart; a shorter decode (the windowed fallback's) is hista's and counted."""
    real = tokenizer.decode

    def timed(ids, *args, **kwargs):
        start = time.process_time()
        try:
            return real(ids, *args, **kwargs)
        finally:
            if len(ids) == N:
                CLOCK.excluded += time.process_time() - start

    monkeypatch.setattr(tokenizer, "decode", timed)


def _fill(unit: list[int], n: int = N) -> list[int]:
    return (unit * (n // len(unit) + 1))[:n]


def _byte_level_families(tok) -> dict[str, list[int]]:
    b = lambda *values: [_byte_level_id(tok, v) for v in values]  # noqa: E731
    rng = random.Random(0)
    return {
        "lone-continuation": b(0x80) * N,
        "continuation-mix": b(*(rng.randrange(0x80, 0xC0) for _ in range(N))),
        "replacement-char": _fill(_encode(tok, "\ufffd")),
        "lone-lead": b(0xE2) * N,
        "lead-then-ascii": _fill(b(0xE2) + _encode(tok, "a")),
        "truncated-4-byte": _fill(b(0xF0, 0x90, 0x80)),
        "split-euro": _fill(b(0xE2, 0x82, 0xAC)),
        "split-emoji": _fill(b(*"🎉".encode())),
        "split-then-eos": _fill(b(0xE2, 0x82) + [tok.eos_token_id]),
        "one-token": _encode(tok, "a") * N,
        "blanks": _fill(_encode(tok, "    ")),
        "newlines": _fill(_encode(tok, "\n")),
        "eos": [tok.eos_token_id] * N,
        "multilingual": _fill(_encode(tok, _TEXTS[0] + _TEXTS[1])),
        "random-ids": [rng.randrange(len(tok)) for _ in range(N)],
    }


def _assert_fast(monkeypatch, tokenizer, families):
    _decode_excluded(monkeypatch, tokenizer)
    slow = {}
    for name, ids in families.items():
        text, offsets = decode_with_offsets(tokenizer, ids)  # fills the cache of token bytes
        assert len(offsets) == N and offsets[-1][1] == len(text), name
        limit = LIMIT_S * max(1.0, len(text) / 65536)
        why = CLOCK.over_budget(lambda x: decode_with_offsets(tokenizer, x), ids, ids[: N // 4], limit=limit,
                                guard_s=GUARD_S, growth=GROWTH)
        if why:
            slow[name] = "%s for %d characters (limit %.3f s)" % (why, len(text), limit)
    assert not slow, (f"over {LIMIT_S} s of CPU time per 64k characters, and not linear, on {len(slow)} inputs "
                      f"of {N} tokens: {slow}")


def test_adversarial_token_ids_are_fast(tiny, monkeypatch):
    _assert_fast(monkeypatch, tiny.tokenizer, _byte_level_families(tiny.tokenizer))


def test_adversarial_byte_fallback_ids_are_fast(monkeypatch):
    tok = _llama_like("llama")
    byte = lambda v: 3 + v  # noqa: E731
    rng = random.Random(1)
    families = {
        "lone-continuation": [byte(0x80)] * N,
        "lone-lead": [byte(0xE2)] * N,
        "split-euro": _fill([byte(0xE2), byte(0x82), byte(0xAC)]),
        "split-then-eos": _fill([byte(0xE2), byte(0x82), 2]),
        "one-token": [tok.convert_tokens_to_ids("▁")] * N,
        "random-ids": [rng.randrange(len(tok)) for _ in range(N)],
    }
    _assert_fast(monkeypatch, tok, families)
