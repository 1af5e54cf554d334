"""The transformers-generate rollout engine and token offsets (SPEC §3, §7)."""

import pytest
import torch

from hista.models import forward
from hista.rollout import GenerateEngine, SamplingConfig, decode_with_offsets


def test_offsets_tile_text_and_match_tokens(tiny):
    tok = tiny.tokenizer
    text = "Tom has 12 apples; 12 + 5 = 17, so \\boxed{17}. Ünïcode → 答案 🎉 done"
    ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    decoded, offsets = decode_with_offsets(tok, ids)
    assert decoded == text and len(offsets) == len(ids)
    assert offsets[0][0] == 0 and offsets[-1] == (len(text), len(text))  # EOS: empty span
    assert all(a[1] == b[0] for a, b in zip(offsets, offsets[1:]))
    # every number starts inside the span of the token that holds its first character
    for number in ("12", "17"):
        pos = text.index(number)
        holder = [k for k, (s, e) in enumerate(offsets) if s <= pos < e]
        assert len(holder) == 1 and number.startswith(tok.decode([ids[holder[0]]]).strip()[:1])


def test_offsets_random_ids_fall_back_consistently(tiny):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, len(tiny.tokenizer), (60,), generator=g).tolist()
    text, offsets = decode_with_offsets(tiny.tokenizer, ids)
    assert len(offsets) == 60 and offsets[-1][1] == len(text)
    assert all(s <= e for s, e in offsets)


@pytest.fixture(scope="module")
def engine(tiny):
    return GenerateEngine(tiny, SamplingConfig(temperature=1.0, max_new_tokens=12, batch_size=5))


def test_generate_is_seeded_and_consistent(engine, tiny):
    problems = ["What is 2 + 3?", "Start with 4. Add 1. What number do you get?"]
    a = engine.generate(problems, 3, seed=7)
    b = engine.generate(problems, 3, seed=7)
    c = engine.generate(problems, 3, seed=8)
    ids = lambda groups: [r.completion_ids for g in groups for r in g]  # noqa: E731
    assert ids(a) == ids(b) and ids(a) != ids(c)
    assert [len(g) for g in a] == [3, 3]
    flat = [r for g in a for r in g]
    for r in flat:
        assert 1 <= len(r.completion_ids) <= 12
        assert len(r.offsets) == len(r.logprobs) == len(r.completion_ids)
        assert r.completion_text == tiny.tokenizer.decode(r.completion_ids, skip_special_tokens=True)
        assert "\\boxed{}" in r.prompt_text and r.prompt_ids[-1] != tiny.tokenizer.pad_token_id
    # the recorded old log-probs equal a fresh forward pass at the sampling temperature
    out = forward(tiny, [r.prompt_ids for r in flat], [r.completion_ids for r in flat], layer=None)
    for r, lp in zip(flat, out.logprobs):
        torch.testing.assert_close(torch.tensor(r.logprobs), lp, atol=1e-4, rtol=0)


def test_greedy_generation(tiny):
    eng = GenerateEngine(tiny, SamplingConfig(temperature=0.0, max_new_tokens=5, batch_size=4))
    a = eng.generate(["Hi"], 2, seed=0)[0]
    assert a[0].completion_ids == a[1].completion_ids
