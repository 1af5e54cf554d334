"""The rollout engines and token offsets (SPEC §3, §7)."""

import pytest
import torch

from hista.models import forward
from hista.rollout import GenerateEngine, SamplingConfig, decode_with_offsets
from hista.rollout.engines import available_engines

pytestmark = pytest.mark.xdist_group("rollout-engines")  # its module fixtures are built once (tests/conftest.py)


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


#: log-probs against a fresh float32 forward pass on CPU: the same kernels for hf, GPU kernels for vllm
TOLERANCE = {"hf": 1e-4, "vllm": 2e-2}


@pytest.fixture(scope="module", params=available_engines())
def engine(tiny, request):
    from hista.rollout.engines import make_engine

    return make_engine(request.param, tiny, SamplingConfig(temperature=1.0, max_new_tokens=12, batch_size=5))


def test_generate_is_seeded_and_consistent(engine, tiny):
    """The engine contract (SPEC §7), for every engine this environment runs."""
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
        torch.testing.assert_close(torch.tensor(r.logprobs), lp, atol=TOLERANCE[engine.name], rtol=0)


def test_greedy_generation(engine):
    eng = engine.with_config(SamplingConfig(temperature=0.0, max_new_tokens=5, batch_size=4))
    a = eng.generate(["Hi"], 2, seed=0)[0]
    assert a[0].completion_ids == a[1].completion_ids


def test_greedy_takes_the_argmax_and_records_log_probs_of_the_greedy_policy(tiny):
    """Temperature 0: every token is the argmax of a fresh forward pass over prompt + completion
    so far, whatever the seed and the other prompts of the batch (left padding), and its recorded
    log-prob is that of the greedy policy, log 1 = 0 (softmax(logits / T) as T -> 0)."""
    eng = GenerateEngine(tiny, SamplingConfig(temperature=0.0, max_new_tokens=10, batch_size=8))
    problems = ["What is 2 + 3?", "Start with 4. Add 1. Then multiply by 3. What number do you get?"]
    mixed = eng.generate(problems, 1, seed=1)
    alone = [eng.generate([p], 1, seed=2)[0] for p in problems]
    for group, single in zip(mixed, alone):
        r = group[0]
        assert r.completion_ids == single[0].completion_ids
        ids = torch.tensor([r.prompt_ids + r.completion_ids])
        with torch.no_grad():
            logits = tiny.model(input_ids=ids).logits[0].float()
        p = len(r.prompt_ids)
        assert logits[p - 1 : p - 1 + len(r.completion_ids)].argmax(-1).tolist() == r.completion_ids
        assert len(r.logprobs) == len(r.completion_ids) and max(abs(lp) for lp in r.logprobs) < 1e-6


def _first_token_draws(tiny, prefix, n, temperature, top_p, seed=0, chunk=1000):
    from hista.rollout.engine import sample_continuations

    rows = sample_continuations(tiny.model, [prefix], [0] * n, max_new_tokens=1, temperature=temperature,
                                top_p=top_p, eos=[], pad=0, seeds=[seed * n + k for k in range(n)], batch_size=chunk)
    return torch.tensor([tokens[0] for tokens, _ in rows])


@pytest.mark.parametrize("top_p", [1.0, 0.5])
def test_the_sampled_distribution_is_softmax_of_logits_over_temperature(tiny, top_p):
    """First tokens of 10,000 draws against softmax(logits / T), after transformers' own top-p
    warper when top_p < 1: chi-square over 5 bins of the tokens ranked by probability, below
    the 0.1% critical value for 4 degrees of freedom (18.47); fixed seed, so the test is exact."""
    from transformers.generation.logits_process import TopPLogitsWarper

    prefix, temperature, n = [1, 2, 3, 4, 5], 0.1, 10_000
    with torch.no_grad():
        logits = tiny.model(input_ids=torch.tensor([prefix])).logits[0, -1].float() / temperature
    if top_p < 1.0:
        logits = TopPLogitsWarper(top_p)(None, logits[None])[0]
    probs = torch.softmax(logits, dim=-1).double()
    rank = torch.empty_like(probs, dtype=torch.long)
    rank[probs.argsort(descending=True)] = torch.arange(probs.numel())
    edges = [0, 1, 3, 10, 100, probs.numel()]
    draws = _first_token_draws(tiny, prefix, n, temperature, top_p)
    assert bool((probs[draws] > 0).all())  # never a token outside the nucleus
    chi2 = 0.0
    for lo, hi in zip(edges, edges[1:]):
        expected = float(probs[(rank >= lo) & (rank < hi)].sum()) * n
        observed = int(((rank[draws] >= lo) & (rank[draws] < hi)).sum())
        if expected > 0:
            chi2 += (observed - expected) ** 2 / expected
        else:
            assert observed == 0
    assert chi2 < 18.47, chi2


def test_a_shared_prefix_gives_what_encoding_each_row_gives(tiny):
    """Three paths sample the same tokens with the same log-probs (within 1e-4): rows of one
    prefix attending to its single copy (shared-prefix attention, sources in order), the
    prefix's cache copied to its rows (sources out of order), and every row encoding its own
    prefix."""
    from hista.rollout import prefix_attention
    from hista.rollout.engine import sample_continuations

    prefixes = [[1, 2, 3, 4, 5, 6], [7, 8, 9]]
    sources = [0, 0, 0, 1, 1]
    assert prefix_attention.supported(tiny.model)

    def draw(prefix_list, source_list):
        return sample_continuations(tiny.model, prefix_list, source_list, max_new_tokens=10, temperature=1.0,
                                    top_p=0.9, eos=[], pad=0, seeds=[3, 4, 5, 6, 7])

    shared = draw(prefixes, sources)
    copied = draw(prefixes[::-1], [1 - s for s in sources])  # the same rows, sources out of order
    each = draw([prefixes[s] for s in sources], list(range(len(sources))))
    for other in (copied, each):
        assert [tokens for tokens, _ in shared] == [tokens for tokens, _ in other]
        for (_, a), (_, b) in zip(shared, other):
            torch.testing.assert_close(torch.tensor(a), torch.tensor(b), atol=1e-4, rtol=0)


def _qwen2():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    with torch.random.fork_rng():
        torch.manual_seed(0)
        return Qwen2ForCausalLM(Qwen2Config(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                            num_attention_heads=4, num_key_value_heads=2)).eval()


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_llama_decoder_steps_equal_the_module_stack(tiny, family, monkeypatch):
    """Two prefixes, rows finishing early (so finished rows are dropped), Llama (the ``tiny``
    model) and Qwen2 (biased q/k/v projections): decode steps without transformers' module
    stack sample the same tokens with the same log-probs (1e-5) as the module stack; with
    gradients on, the model is not supported and decodes through the stack."""
    from hista.rollout import llama_decode
    from hista.rollout.engine import sample_continuations

    model = tiny.model if family == "llama" else _qwen2()
    with torch.no_grad():
        assert llama_decode.supported(model)
    assert not llama_decode.supported(model)  # gradients on: no packed weights

    def draw():
        return sample_continuations(model, [[1, 2, 3, 4, 5, 6], [7, 8, 9]], [0, 0, 0, 1, 1, 1], max_new_tokens=16,
                                    temperature=1.0, top_p=0.9, eos=list(range(0, model.config.vocab_size, 12)),
                                    pad=0, seeds=list(range(6)))

    steps = []
    monkeypatch.setattr(llama_decode.Decoder, "step",
                        lambda self, *a, step=llama_decode.Decoder.step: steps.append(1) or step(self, *a))
    fast = draw()
    monkeypatch.setattr(llama_decode, "supported", lambda model: False)
    stack = draw()
    assert steps and len({len(tokens) for tokens, _ in fast}) > 1
    assert [tokens for tokens, _ in fast] == [tokens for tokens, _ in stack]
    for (_, a), (_, b) in zip(fast, stack):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), atol=1e-5, rtol=0)


@pytest.mark.parametrize("dtype, atol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("lengths, prefix_of_row", [([9, 3, 6], [0, 0, 1, 2, 2, 2]),  # a call per prefix
                                                    ([9, 3, 6, 2, 8], [0, 0, 1, 2, 2, 2, 3, 4, 4])])  # batched
def test_shared_prefix_attention_equals_attention_over_the_concatenated_keys(lengths, prefix_of_row, dtype, atol):
    """Random queries, left-padded prefixes of several lengths and per-row keys: the merged
    attention equals SDPA over [prefix, own keys] row by row (float rounding; in bfloat16 too,
    the dtype of a model loaded so, and in its dtype), with a call per prefix (three prefixes)
    or one batched, masked call for all (five); dropping rows drops the prefixes left without
    rows."""
    from hista.rollout import prefix_attention
    from hista.rollout.prefix_attention import SharedPrefix, attention

    g = torch.Generator().manual_seed(0)
    heads, kv_heads, dim, width, own = 6, 2, 16, 9, 4
    keys = [torch.randn(len(lengths), kv_heads, width, dim, generator=g).to(dtype)]
    values = [torch.randn(len(lengths), kv_heads, width, dim, generator=g).to(dtype)]
    query = torch.randn(len(prefix_of_row), heads, 1, dim, generator=g).to(dtype)
    key = torch.randn(len(prefix_of_row), kv_heads, own, dim, generator=g).to(dtype)
    value = torch.randn(len(prefix_of_row), kv_heads, own, dim, generator=g).to(dtype)

    class Layer:
        layer_idx = 0

    prefix = SharedPrefix(keys, values, lengths, prefix_of_row)
    assert (prefix.slots is not None) == (len(lengths) >= prefix_attention.BATCHED_GROUPS)
    out, _ = attention(Layer, query, key, value, None, scaling=0.3, shared_prefix=prefix)
    assert out.dtype == dtype
    for row, p in enumerate(prefix_of_row):
        k = torch.cat([keys[0][p, :, width - lengths[p]:], key[row]], dim=1).repeat_interleave(heads // kv_heads, 0)
        v = torch.cat([values[0][p, :, width - lengths[p]:], value[row]], dim=1).repeat_interleave(heads // kv_heads, 0)
        ref = torch.nn.functional.scaled_dot_product_attention(query[row].float(), k.float(), v.float(), scale=0.3)
        torch.testing.assert_close(out[row, 0].float(), ref[:, 0], atol=atol, rtol=0)
    prefix.select([0, 3, 5])  # rows of prefixes 0, 2 and 2: prefix 1 (and any later one) goes
    assert prefix.groups == [(0, 0, 1), (1, 1, 3)] and prefix.lengths == [9, 6]
    torch.testing.assert_close(prefix.keys[0], keys[0][[0, 2]])
    with pytest.raises(ValueError, match="contiguous"):
        SharedPrefix(keys, values, lengths, [0, 1, 0] + list(range(2, len(lengths))))


def test_two_level_draws_follow_the_probabilities_and_skip_zeros():
    """``draw`` on a vocabulary that is not a multiple of its block (300 tokens) with zero
    probabilities inside and at the ends of blocks: 40,000 draws never pick a zero, and their
    counts pass a chi-square test against the probabilities (fixed seed)."""
    from hista.rollout.sampling import draw

    g = torch.Generator().manual_seed(0)
    probs = torch.rand(300, generator=g) ** 4
    probs[[0, 100, 250, 255, 256, 299]] = 0.0
    probs[200:256] = 0.0  # a block whose tail is empty
    probs /= probs.sum()
    from hista.rollout.sampling import uniforms

    draws = torch.cat([draw(probs.expand(4000, -1).contiguous(), uniforms(range(4000), [k] * 4000))[:, 0]
                       for k in range(10)])
    assert bool((probs[draws] > 0).all())
    observed = torch.bincount(draws, minlength=300).double()
    expected = probs.double() * draws.numel()
    seen = expected > 0
    chi2 = float(((observed[seen] - expected[seen]) ** 2 / expected[seen]).sum())
    dof = int(seen.sum()) - 1
    assert chi2 < dof + 4 * (2 * dof) ** 0.5, (chi2, dof)  # about the 0.01% tail of chi-square(dof)


@pytest.mark.parametrize("head", [0, 20])
def test_continuous_batching_gives_each_row_what_it_gets_alone(tiny, monkeypatch, head):
    """Nine rows of four prefixes of different lengths, EOS ids common enough that rows stop at
    different steps, three slots (so finished rows are replaced by waiting ones): every row
    samples the tokens it samples alone (one slot) and through the module stack in one batch,
    with the same log-probs (1e-5), and those equal a fresh forward pass (1e-4). A row depends on
    its prefix and seed only, not on its neighbours or on what finished before it. With a head
    of 20 tokens every prefix starts with, the head is encoded once and the rest per refill."""
    from hista.rollout import llama_decode
    from hista.rollout.engine import sample_continuations

    shared = list(range(30, 30 + head))
    prefixes = [shared + p for p in ([1, 2, 3, 4, 5, 6], [7, 8, 9], [10, 11, 12, 13], [14])]
    sources = [0, 0, 1, 1, 1, 2, 3, 3, 3]
    prefills = []
    fill = llama_decode.Decoder.fill

    def counted(self, prefixes, slots, common=None):  # (prefixes encoded, on top of the common head)
        prefills.append((len(prefixes), common is not None))
        return fill(self, prefixes, slots, common)

    monkeypatch.setattr(llama_decode.Decoder, "fill", counted)

    def draw(batch_size):
        return sample_continuations(tiny.model, prefixes, sources, max_new_tokens=14, temperature=1.0, top_p=1.0,
                                    eos=list(range(0, tiny.model.config.vocab_size, 9)), pad=0,
                                    seeds=[40 + r for r in range(len(sources))], batch_size=batch_size)

    refill = draw(3)
    assert len(prefills) > 2 and len({len(tokens) for tokens, _ in refill}) > 2  # refills, rows of several lengths
    if head:  # the head alone first, then every refill on top of it
        assert prefills[0] == (1, False) and all(used for _, used in prefills[1:])
    alone = draw(1)
    monkeypatch.setattr(llama_decode, "supported", lambda model: False)
    stack = draw(len(sources))
    for other in (alone, stack):
        assert [tokens for tokens, _ in refill] == [tokens for tokens, _ in other]
        for (_, a), (_, b) in zip(refill, other):
            torch.testing.assert_close(torch.tensor(a), torch.tensor(b), atol=1e-5, rtol=0)
    out = forward(tiny, [prefixes[s] for s in sources], [tokens for tokens, _ in refill], layer=None)
    for (_, logps), fresh in zip(refill, out.logprobs):
        torch.testing.assert_close(torch.tensor(logps), fresh, atol=1e-4, rtol=0)


def test_decoder_moves_slots_and_reads_each_run_up_to_its_longest_row(tiny, monkeypatch):
    """A Decoder's slots moved to other slots keep their keys, values and lengths; with rows
    longest first, a step's attention splits into runs that together read fewer positions than
    one run up to the longest row, each reading at least its rows' positions; and the logits of
    a step in runs equal those of a step in one run (float rounding)."""
    from hista.models.packed import packed_linears
    from hista.rollout import llama_decode

    g = torch.Generator().manual_seed(0)
    with torch.no_grad(), packed_linears(tiny.model):
        decoder = llama_decode.Decoder(tiny.model, 40, 64)
        for buffer in (*decoder.keys, *decoder.values):
            buffer.copy_(torch.randn(buffer.shape, generator=g))
        lengths = torch.randint(1, 60, (40,), generator=g)
        decoder.lengths = lengths.clone()
        before = [b.clone() for b in (*decoder.keys, *decoder.values)]
        order = sorted(range(40), key=lambda s: -int(lengths[s]))
        decoder.move(order, 0)
        for old, new in zip(before, (*decoder.keys, *decoder.values)):
            for slot, source in enumerate(order):
                assert torch.equal(new[slot, :, : lengths[source]], old[source, :, : lengths[source]])
        assert decoder.lengths.tolist() == sorted(lengths.tolist(), reverse=True)

        runs = decoder.chunks()
        assert len(runs) > 1 and runs[0][0] == 0 and runs[-1][1] == 40
        assert all(end == first for (_, end, _), (first, _, _) in zip(runs, runs[1:]))
        assert all(span > int(decoder.lengths[first:end].max()) for first, end, span in runs)
        assert sum((end - first) * span for first, end, span in runs) < 40 * (int(decoder.lengths.max()) + 1)
        tokens, active = torch.randint(0, tiny.model.config.vocab_size, (40, 1), generator=g), torch.ones(40).bool()
        state = [b.clone() for b in (*decoder.keys, *decoder.values)], decoder.lengths.clone()
        in_runs = decoder.step(tokens, active)
        for buffer, saved in zip((*decoder.keys, *decoder.values), state[0]):
            buffer.copy_(saved)
        decoder.lengths = state[1]
        monkeypatch.setattr(llama_decode, "CALL_POSITIONS", 10**6)  # every run merged into one
        assert len(decoder.chunks()) == 1
        torch.testing.assert_close(decoder.step(tokens, active), in_runs, atol=1e-5, rtol=0)


def test_continuous_batching_in_runs_gives_each_row_what_it_gets_alone(tiny, monkeypatch):
    """Thirty rows of six prefixes from 1 to 40 tokens, seventeen slots: as rows finish and
    others start, the rows running move to keep the longest first (moves happen) and steps read
    attention in several runs, and every row still samples what it samples alone, with the same
    log-probs (1e-5)."""
    from hista.rollout import llama_decode
    from hista.rollout.engine import sample_continuations

    prefixes = [list(range(1, 1 + n)) for n in (40, 1, 25, 7, 33, 12)]
    sources = [r % 6 for r in range(30)]
    seen = {"moves": 0, "runs": 1}
    move, chunks = llama_decode.Decoder.move, llama_decode.Decoder.chunks

    def moved(self, *a):
        seen["moves"] += 1
        return move(self, *a)

    def split(self):
        runs = chunks(self)
        seen["runs"] = max(seen["runs"], len(runs))
        return runs

    monkeypatch.setattr(llama_decode.Decoder, "move", moved)
    monkeypatch.setattr(llama_decode.Decoder, "chunks", split)

    def draw(batch_size):
        return sample_continuations(tiny.model, prefixes, sources, max_new_tokens=24, temperature=1.0, top_p=1.0,
                                    eos=list(range(0, tiny.model.config.vocab_size, 15)), pad=0,
                                    seeds=[7 * r for r in range(len(sources))], batch_size=batch_size)

    many = draw(17)
    assert seen["moves"] and seen["runs"] > 1
    alone = draw(1)
    assert [tokens for tokens, _ in many] == [tokens for tokens, _ in alone]
    for (_, a), (_, b) in zip(many, alone):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), atol=1e-5, rtol=0)


def test_decoding_keeps_freed_memory_on_glibc():
    """On Linux with glibc (CI's machines) the engine's allocator setting is accepted, once per
    process (it changes where memory comes from, not a value)."""
    import platform

    from hista.rollout import heap

    expected = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    assert heap.keep_freed_memory() is expected
    assert heap.keep_freed_memory() is expected


def test_a_sample_depends_on_its_prompt_and_seed_only(tiny):
    """The engine's samples do not depend on the batch size or on the other prompts of the call
    (SPEC §7): prompt i's samples are those of a call with prompt i alone and its seed."""
    problems = ["What is 2 + 3?", "Start with 4. Add 1. What number do you get?", "Pick A or B."]
    wide = GenerateEngine(tiny, SamplingConfig(temperature=1.0, max_new_tokens=8, batch_size=16))
    narrow = wide.with_config(SamplingConfig(temperature=1.0, max_new_tokens=8, batch_size=2))
    seeds = [11, 12, 13]
    together = wide.generate(problems, 3, prompt_seeds=seeds)
    assert together != narrow.generate(problems, 3, seed=0)
    for i, problem in enumerate(problems):
        alone = narrow.generate([problem], 3, prompt_seeds=[seeds[i]])[0]
        assert [r.completion_ids for r in alone] == [r.completion_ids for r in together[i]]
