"""Character offsets of generated tokens in their decoded text (SPEC §3, §4.2, §7: milestones are
mapped to the generated tokens, never by re-tokenising text).

The work is linear in the number of tokens, whatever the model emits (issue 41: lone UTF-8
continuation bytes, replacement characters, long runs of one token cost no more per token
than prose).

- **Emulated decoders** (``tokenizers``-backed tokenizers whose decoder is byte-level BPE, as
  SmolLM2, GPT-2, Llama 3 and Qwen, or sentencepiece-style ``Replace``/``Metaspace``/
  ``ByteFallback``/``Fuse``/``Strip`` chains, as Llama 2, Mistral and Gemma): each token id is
  turned into its bytes once per tokenizer (cached), and the characters of the concatenated
  bytes are assigned in one vectorised UTF-8 pass; the result is checked against the
  tokenizer's own ``decode``.
- **Any other tokenizer**, or when that check fails: each token's text is found by decoding a
  short window before it with and without the token (a bounded look-back, so the cost per
  token is bounded); completions of at most ``PREFIX_MAX_TOKENS`` tokens whose windowed spans
  do not add up to the text are decoded prefix by prefix, as before.
"""

from __future__ import annotations

import json
import re
import sys
import weakref
from typing import Sequence

import numpy as np

#: completions up to this many tokens fall back to exact prefix decoding when the windowed pass
#: disagrees with the full text (a bounded, hence constant, cost); longer ones keep the windowed spans.
PREFIX_MAX_TOKENS = 256

#: a trailing incomplete UTF-8 sequence decodes to at most this many U+FFFD (one per byte
#: with sentencepiece's byte fallback, one in all with byte-level BPE)
_MAX_PENDING = 3


def decode_with_offsets(tokenizer, ids: Sequence[int], window: int = 8) -> tuple[str, list[tuple[int, int]]]:
    """Decode ``ids`` as ``tokenizer.decode(ids, skip_special_tokens=True)`` does (the
    tokenizer's own ``clean_up_tokenization_spaces`` setting applies) and return that text with
    the (start, end) span of every token in it.

    The spans tile the text in order: the first starts at 0, each starts where the one before
    ends, the last ends at ``len(text)``. A token's span holds the characters that its bytes
    complete: a special token (skipped) and a token holding only the first bytes of a
    character split across tokens get empty spans, and the token with the character's last
    byte holds it. Bytes that are not valid UTF-8 decode to U+FFFD (as the tokenizer decodes
    them), held by the token whose byte shows them invalid; an incomplete sequence at the end
    goes to the last token with bytes. ``window`` is the look-back (in tokens) of the windowed
    pass used for tokenizers that cannot be emulated (see the module docstring).
    """
    ids = list(map(int, ids))
    text = _decode(tokenizer, ids)
    if not ids:
        return text, []
    offsets = emulated_offsets(tokenizer, ids, text)
    if offsets is None:
        offsets = _windowed(tokenizer, ids, text, window)
    return text, offsets


def _decode(tokenizer, ids: list[int]) -> str:
    """``tokenizer.decode(ids, skip_special_tokens=True)``. A transformers tokenizer gets the
    ids as an array: its check that a list holds only numbers costs more than the decoding."""
    base = sys.modules.get("transformers.tokenization_utils_base")
    if ids and base is not None and isinstance(tokenizer, base.PreTrainedTokenizerBase):
        return tokenizer.decode(np.fromiter(ids, dtype=np.int64, count=len(ids)), skip_special_tokens=True)
    return tokenizer.decode(ids, skip_special_tokens=True)


# --------------------------------------------------------------------------- emulated decoders


def _byte_level_chars() -> dict[str, int]:
    """GPT-2's byte-to-unicode table, inverted: the character that stands for each byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


#: GPT-2's byte-to-unicode table, inverted: the character of a byte-level vocabulary -> its byte
BYTE_LEVEL_CHARS = _byte_level_chars()
#: str.translate table: a byte-level character to the latin-1 character of its byte; characters
#: below 256 that are not byte-level characters map to one that latin-1 cannot encode
_TO_LATIN1 = {ord(c): chr(b) for c, b in BYTE_LEVEL_CHARS.items()}
_TO_LATIN1.update({c: "\uffff" for c in range(256) if chr(c) not in BYTE_LEVEL_CHARS})
_BYTE_TOKEN = re.compile(r"<0x(\+?[0-9A-Fa-f]|[0-9A-Fa-f]{2})>")
_REPLACEMENT = "\ufffd".encode()
_BYTES = [bytes((b,)) for b in range(256)]
#: transformers' clean_up_tokenization, in its order: (pattern, indices of the pattern removed)
_CLEANUP = [(" .", (0,)), (" ?", (0,)), (" !", (0,)), (" ,", (0,)), (" ' ", (0, 2)), (" n't", (0,)),
            (" 'm", (0,)), (" 's", (0,)), (" 've", (0,)), (" 're", (0,))]

_PLANS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class _Cache(dict):
    """Token id -> value, computed on first use."""

    def __init__(self, compute):
        super().__init__()
        self.compute = compute

    def __missing__(self, key):
        value = self[key] = self.compute(key)
        return value


class _Unsupported(Exception):
    pass


class _Plan:
    """How a ``tokenizers`` decoder turns token ids into text, for the decoders emulated here.

    ``byte_level``: token strings are byte-level BPE characters (ByteLevel decoder). Otherwise
    ``steps`` are per-token string operations (Replace, Metaspace, Strip before any grouping),
    ``byte_fallback`` groups ``<0xNN>`` tokens (ByteFallback), and ``strip`` is a
    (content, start, stop) applied to the whole text (Strip after Fuse or ByteLevel)."""

    def __init__(self, backend):
        self.backend = backend
        decoder = backend.decoder
        if decoder is None:
            raise _Unsupported("no decoder")
        added = backend.get_added_tokens_decoder()
        self.specials = {token.content for token in added.values() if token.special}
        self.byte_level, self.byte_fallback, self.steps, self.strip = False, False, [], []
        self.first_differs = False  # Metaspace treats the chain's first element apart
        self._compile(_flatten(json.loads(decoder.__getstate__())))
        self.cache = _Cache(self.chunk)
        self.fingerprint = _fingerprint(backend)

    def _compile(self, steps: list[dict]) -> None:
        whole = False  # the chain is one element (after Fuse or ByteLevel)
        for step in steps:
            kind = step.get("type")
            if kind == "ByteLevel" and not (whole or self.steps or self.byte_fallback):
                self.byte_level = whole = True
            elif kind == "Fuse":
                whole = True
            elif kind == "Strip" and whole:
                self.strip.append((step["content"], int(step["start"]), int(step["stop"])))
            elif whole or self.byte_fallback:
                raise _Unsupported(kind)
            elif kind == "ByteFallback":
                self.byte_fallback = True
            elif kind == "Replace" and set(step["pattern"]) == {"String"} and step["pattern"]["String"]:
                self.steps.append(("replace", step["pattern"]["String"], step["content"]))
            elif kind == "Strip":
                self.steps.append(("strip", step["content"], int(step["start"]), int(step["stop"])))
            elif kind == "Metaspace":
                scheme = step.get("prepend_scheme")
                if scheme is None:
                    scheme = "always" if step.get("add_prefix_space", True) else "never"
                if step.get("add_prefix_space") is False:
                    scheme = "never"
                self.steps.append(("metaspace", step["replacement"], scheme != "never"))
                self.first_differs = self.first_differs or scheme != "never"
            else:
                raise _Unsupported(kind)

    def token(self, i: int):
        """The token's string after the per-token steps, or None when decoding skips it."""
        token = self.backend.id_to_token(i)
        if token is None or token in self.specials:
            return None
        return token

    def piece(self, token: str, first: bool) -> str:
        for step in self.steps:
            if step[0] == "replace":
                token = token.replace(step[1], step[2])
            elif step[0] == "metaspace":
                token = token.replace(step[1], "" if first and step[2] else " ")
            else:
                token = _strip(token, *step[1:])
        return token

    def chunk(self, i: int):
        """Byte-level: the token's bytes (b"" when skipped). Otherwise: the token's piece as
        bytes, its byte value (an int) for a byte-fallback token, or None when skipped."""
        token = self.token(i)
        if self.byte_level:
            if token is None:
                return b""
            try:
                return token.translate(_TO_LATIN1).encode("latin-1")
            except UnicodeEncodeError:  # not all byte-level characters: the token's own UTF-8
                return token.encode()
        if token is None:
            return None
        return self._piece_chunk(self.piece(token, first=False))

    def _piece_chunk(self, piece: str):
        if self.byte_fallback and len(piece) == 6 and _BYTE_TOKEN.fullmatch(piece):
            return int(piece[3:5], 16)
        return piece.encode()

    def chunks(self, ids: list[int]) -> list[bytes]:
        values = list(map(self.cache.__getitem__, ids))
        if self.byte_level:
            return values
        if self.first_differs:  # the first token decoding keeps is the chain's first element
            for k, value in enumerate(values):
                if value is not None:
                    values[k] = self._piece_chunk(self.piece(self.token(ids[k]), first=True))
                    break
        return _resolve_byte_groups(values, self.byte_fallback)


def _flatten(step: dict) -> list[dict]:
    if step.get("type") == "Sequence":
        return [inner for s in step["decoders"] for inner in _flatten(s)]
    return [step]


def _strip_counts(text: str, content: str, start: int, stop: int) -> tuple[int, int]:
    """tokenizers' Strip decoder on one element: how many of up to ``start`` leading and
    ``stop`` trailing ``content`` characters it removes."""
    lead = 0
    while lead < start and lead < len(text) and text[lead] == content:
        lead += 1
    trail = 0
    while trail < stop and trail < len(text) - lead and text[len(text) - 1 - trail] == content:
        trail += 1
    return lead, trail


def _strip(text: str, content: str, start: int, stop: int) -> str:
    lead, trail = _strip_counts(text, content, start, stop)
    return text[lead : len(text) - trail]


_NONE_TYPE, _INT_TYPE = type(None), int


def _objects(items: list) -> np.ndarray:
    """A 1-d object array of ``items`` (``np.array`` would inspect each item)."""
    return np.fromiter(items, dtype=object, count=len(items))


def _resolve_byte_groups(values: list, byte_fallback: bool) -> list[bytes]:
    """``values`` as bytes: b"" for a skipped token (None); with ``byte_fallback``, a run of byte
    tokens (ints; skipped tokens do not break it) is its bytes when they are valid UTF-8, else
    one U+FFFD per byte token. All runs are checked at once, over their bytes with an ASCII
    byte before each run."""
    resolved = _objects(values)
    types = _objects(list(map(type, values)))
    skipped = types == _NONE_TYPE
    resolved[skipped] = b""
    if not byte_fallback:
        return resolved.tolist()
    kept = np.flatnonzero(~skipped)
    is_byte = types[kept] == _INT_TYPE
    if not is_byte.any():
        return resolved.tolist()
    members = kept[is_byte]
    first = is_byte & ~np.concatenate(([False], is_byte[:-1]))  # a run starts here
    run = np.cumsum(first)[is_byte] - 1
    where = np.arange(len(members)) + run + 1  # each byte's place, after its run's separator
    data = np.zeros(len(members) + int(run[-1]) + 1, dtype=np.uint8)
    codes = resolved[members].astype(np.int64)
    data[where] = codes
    starts = where[first[is_byte]]
    bad = np.zeros(len(starts), dtype=bool)
    bad[np.searchsorted(starts, _invalid_positions(data.tobytes()), side="right") - 1] = True
    chunks = _objects(_BYTES)[codes]
    chunks[bad[run]] = _REPLACEMENT
    resolved[members] = chunks
    return resolved.tolist()


def _fingerprint(backend) -> tuple:
    """What a plan depends on: the backend, its vocabulary size (added tokens included) and its
    decoder."""
    decoder = backend.decoder
    return id(backend), backend.get_vocab_size(with_added_tokens=True), decoder and decoder.__getstate__()


def _plan(tokenizer, stale=None):
    """The tokenizer's plan (cached per tokenizer object), False when it cannot be emulated;
    ``stale``: a plan that did not reproduce a decode, rebuilt if the tokenizer changed since."""
    try:
        plan = _PLANS.get(tokenizer)
    except TypeError:  # not hashable or not weak-referenceable: no cache
        plan = None
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if plan is None or (stale is not None and plan is stale and _fingerprint(backend) != plan.fingerprint):
        try:
            plan = _Plan(backend) if backend is not None else False
        except (_Unsupported, AttributeError, KeyError, TypeError, ValueError):
            plan = False
        try:
            _PLANS[tokenizer] = plan
        except TypeError:
            pass
    return plan


def token_bytes(tokenizer, ids: Sequence[int]):
    """The bytes each token id stands for under the tokenizer's emulated decoder (module
    docstring), or None when its decoder is not emulated."""
    plan = _plan(tokenizer)
    return [plan.cache[int(i)] for i in ids] if plan else None


def emulated_offsets(tokenizer, ids: list[int], text: str):
    """Offsets from the emulated decoder (module docstring), or None when the tokenizer is not
    emulated or the emulation does not reproduce ``text``, its decode of ``ids`` (tried again
    with a new plan if tokens were added or the decoder changed since the plan was made)."""
    stale = None
    for _ in range(2):
        plan = _plan(tokenizer, stale)
        if not plan or plan is stale:
            return None
        offsets = _check(tokenizer, plan, plan.chunks(ids), text)
        if offsets is not None:
            return offsets
        stale = plan
    return None


def _check(tokenizer, plan: _Plan, chunks: list[bytes], text: str):
    data = b"".join(chunks)
    try:
        decoded, valid = data.decode("utf-8"), True
    except UnicodeDecodeError:
        decoded, valid = data.decode("utf-8", "replace"), False
    ends = _char_ends(data, np.fromiter(map(len, chunks), dtype=np.int64, count=len(chunks)).cumsum(), valid)
    if ends[-1] != len(decoded):  # the unit count disagrees with Python's decoder: never expected
        return None
    for content, start, stop in plan.strip:
        lead, trail = _strip_counts(decoded, content, start, stop)
        decoded = decoded[lead : len(decoded) - trail]
        ends = np.clip(ends - lead, 0, len(decoded))
    if decoded != text and getattr(tokenizer, "clean_up_tokenization_spaces", False):
        decoded, ends = _cleanup(decoded, ends)
    if decoded != text:
        return None
    ends = ends.tolist()
    starts = [0, *ends]
    starts.pop()
    return list(zip(starts, ends))


def _cleanup(text: str, ends: np.ndarray) -> tuple[str, np.ndarray]:
    """transformers' ``clean_up_tokenization`` (each replacement in turn over the whole text),
    moving the token ends with the characters it removes."""
    for pattern, removed in _CLEANUP:
        parts = text.split(pattern)
        if len(parts) == 1:
            continue
        lengths = np.fromiter(map(len, parts[:-1]), dtype=np.int64, count=len(parts) - 1)
        starts = np.cumsum(lengths) + np.arange(len(parts) - 1) * len(pattern)
        positions = np.sort(np.concatenate([starts + r for r in removed]))
        ends = ends - np.searchsorted(positions, ends, side="left")
        text = "".join(c for j, c in enumerate(pattern) if j not in removed).join(parts)
    return text, ends


# UTF-8 decoding in units: a valid character or a maximal invalid subpart (one U+FFFD), as
# Python's and Rust's lossy UTF-8 decoders both read bytes.
_NEED = np.zeros(256, dtype=np.int64)  # the continuation bytes a lead byte expects
_NEED[0xC2:0xE0], _NEED[0xE0:0xF0], _NEED[0xF0:0xF5] = 1, 2, 3
_LOW2 = np.full(256, 0x80, dtype=np.int64)  # the valid range of the byte after a lead byte
_HIGH2 = np.full(256, 0xBF, dtype=np.int64)
_LOW2[0xE0], _HIGH2[0xED], _LOW2[0xF0], _HIGH2[0xF4] = 0xA0, 0x9F, 0x90, 0x8F


def _scan(a: np.ndarray):
    """The non-ASCII bytes of ``a`` read as UTF-8 units: their positions, the bytes, whether
    each continuation byte belongs to the character of the lead byte before it (``absorbed``),
    its depth in that character, the index of that lead among the non-ASCII bytes, and the
    continuation bytes that lead expects."""
    pos = np.flatnonzero(a >= 0x80)
    b = a[pos]
    index = np.arange(len(pos))
    continuation = (b & 0xC0) == 0x80
    lead = np.maximum.accumulate(np.where(continuation, -1, index))  # last lead byte (or stray)
    has_lead = lead >= 0
    lead = np.where(has_lead, lead, 0)
    depth = pos - pos[lead]
    lead_byte = b[lead]
    need = _NEED[lead_byte]
    after = np.append(b, 0)[lead + 1]
    second_ok = ((np.append(pos, -2)[lead + 1] == pos[lead] + 1)
                 & (after >= _LOW2[lead_byte]) & (after <= _HIGH2[lead_byte]))
    # a continuation byte belongs to its lead's character when nothing else lies between them
    absorbed = continuation & has_lead & (depth == index - lead) & second_ok & (depth <= need)
    return pos, b, absorbed, depth, lead, need


def _char_ends(data: bytes, cuts: np.ndarray, valid: bool = False) -> np.ndarray:
    """For each cut (a byte position), the number of characters of
    ``data.decode('utf-8', 'replace')`` that the bytes before it complete: an incremental
    decoder's output once it has read them. A sequence still incomplete at the end of ``data``
    counts for the cuts at the end. Vectorised over the non-ASCII bytes (an ASCII byte is
    always one complete character); ``valid``: ``data`` is known to be valid UTF-8."""
    n = len(data)
    if data.isascii():
        return cuts
    if valid:  # every byte but a continuation byte starts a character; a cut may split one
        a = np.frombuffer(data, dtype=np.uint8)
        continuation = np.flatnonzero((a & 0xC0) == 0x80)
        split = (cuts < n) & ((a[np.minimum(cuts, n - 1)] & 0xC0) == 0x80)
        return cuts - np.searchsorted(continuation, cuts) - split
    pos, b, absorbed, depth, _, need = _scan(np.frombuffer(data, dtype=np.uint8))
    unit_need = np.where(absorbed, need, _NEED[b])
    waiting = unit_need > np.where(absorbed, depth, 0)  # its unit expects more bytes
    units = cuts - np.searchsorted(pos[absorbed], cuts)  # unit starts before each cut
    j = np.minimum(np.searchsorted(pos, cuts - 1), len(pos) - 1)
    ends = units - ((cuts > 0) & (pos[j] == cuts - 1) & waiting[j])
    if pos[-1] == n - 1 and waiting[-1]:
        ends = ends + (cuts == n)
    return ends


def _invalid_positions(data: bytes) -> np.ndarray:
    """Positions of bytes that are not part of a valid UTF-8 character (sorted)."""
    if data.isascii():
        return np.zeros(0, dtype=np.int64)
    pos, b, absorbed, depth, lead, need = _scan(np.frombuffer(data, dtype=np.uint8))
    complete = np.zeros(len(pos), dtype=bool)
    complete[lead[absorbed & (depth == need)]] = True  # leads whose last byte arrived
    lead_ok = ~((b & 0xC0) == 0x80) & (_NEED[b] > 0) & complete
    return pos[~(absorbed | lead_ok)]


# --------------------------------------------------------------------------- any tokenizer


def _stable_len(text: str) -> int:
    """The length of ``text`` without the U+FFFD of a trailing incomplete sequence."""
    n = len(text)
    k = 0
    while k < _MAX_PENDING and k < n and text[n - 1 - k] == "\ufffd":
        k += 1
    return n - k


def _spans(ends: list[int], total: int) -> list[tuple[int, int]]:
    """Spans tiling ``[0, total)`` from token ends (clamped into it, made monotone; the last
    token ends at ``total``)."""
    spans, start = [], 0
    last = len(ends) - 1
    for k, end in enumerate(ends):
        end = total if k == last else min(max(end, start), total)
        spans.append((start, end))
        start = end
    return spans


def _windowed(tokenizer, ids: list[int], text: str, window: int) -> list[tuple[int, int]]:
    """Each token's text from decoding a window of ``window`` to ``2 * window - 1`` tokens
    before it, with and without the token: two decodes of at most ``2 * window`` tokens a token
    (one, where consecutive windows share their start)."""
    decode = lambda part: tokenizer.decode(part, skip_special_tokens=True)  # noqa: E731
    block = max(1, int(window))
    ends, pos, exact = [], 0, True
    lo_before, after = -1, ""
    for k in range(len(ids)):
        lo = max(0, (k // block - 1) * block)
        before = after if lo == lo_before else decode(ids[lo:k])
        after = decode(ids[lo : k + 1])
        if exact and not after.startswith(before[: _stable_len(before)]):
            exact = False  # not local or not prefix-stable: lengths only
        pos += _stable_len(after) - _stable_len(before)
        ends.append(pos)
        lo_before = lo
    if (not exact or pos != len(text)) and len(ids) <= PREFIX_MAX_TOKENS:
        return _prefix(tokenizer, ids, text)
    return _spans(ends, len(text))


def _prefix(tokenizer, ids: list[int], text: str) -> list[tuple[int, int]]:
    ends = [_stable_len(tokenizer.decode(ids[: k + 1], skip_special_tokens=True)) for k in range(len(ids))]
    return _spans(ends, len(text))
