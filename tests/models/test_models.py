"""Model loading and the batched forward pass (SPEC §7)."""

import pytest
import torch

from hista.errors import InputError
from hista.models import ALIASES, forward, load


def _plain(lm, prompt, completion):
    """Reference: one unpadded transformers forward of a single sequence."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        out = lm.model(input_ids=ids, output_hidden_states=True)
        last = lm.model.model(input_ids=ids).last_hidden_state[0]
    logp = torch.log_softmax(out.logits[0].float(), -1)[len(prompt) - 1 : -1]
    token_logp = logp.gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return token_logp, entropy, out.hidden_states[-1][0], last, out.hidden_states[1][0]


def test_forward_matches_plain_transformers(tiny):
    g = torch.Generator().manual_seed(0)
    V = len(tiny.tokenizer)
    prompts = [torch.randint(3, V, (n,), generator=g).tolist() for n in (5, 9, 5)]
    completions = [torch.randint(3, V, (n,), generator=g).tolist() for n in (7, 2, 12)]
    out = forward(tiny, prompts, completions, batch_size=2)
    layer1 = forward(tiny, prompts, completions, layer=1, batch_size=3).hidden
    for i, (p, c) in enumerate(zip(prompts, completions)):
        logp, ent, hid, last, hid1 = _plain(tiny, p, c)
        assert out.logprobs[i].shape == (len(c),) and out.entropies[i].shape == (len(c),)
        assert out.hidden[i].shape == (len(p) + len(c), tiny.model.config.hidden_size)
        torch.testing.assert_close(out.logprobs[i], logp, atol=1e-5, rtol=0)
        torch.testing.assert_close(out.entropies[i], ent, atol=1e-5, rtol=0)
        torch.testing.assert_close(out.hidden[i], hid, atol=1e-5, rtol=0)
        torch.testing.assert_close(out.hidden[i], last, atol=1e-5, rtol=0)  # after the final norm
        torch.testing.assert_close(layer1[i], hid1, atol=1e-5, rtol=0)
        assert (out.entropies[i] > 0).all() and (out.logprobs[i] < 0).all()


def test_forward_temperature_and_empty_completion(tiny):
    p, c = [10, 11, 12], [13, 14]
    hot = forward(tiny, [p, p], [c, []], temperature=2.0, layer=None)
    assert hot.hidden is None and hot.logprobs[1].shape == (0,)
    with torch.no_grad():
        logits = tiny.model(input_ids=torch.tensor([p + c])).logits[0, 2:4] / 2.0
    ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(c)[:, None]).squeeze(-1)
    torch.testing.assert_close(hot.logprobs[0], ref, atol=1e-5, rtol=0)


def test_tiny_is_deterministic_and_small(tiny):
    again = load("tiny", device="cpu")
    for a, b in zip(tiny.model.parameters(), again.model.parameters()):
        assert torch.equal(a, b)
    assert tiny.model.config.num_hidden_layers == 2
    assert len(tiny.tokenizer) == 49152 and tiny.tokenizer.chat_template


def test_unknown_alias_lists_valid_ones():
    with pytest.raises(InputError) as err:
        load("smollm3-nope")
    for alias in ALIASES:
        assert alias in str(err.value)


def test_cli_unknown_model_exits_2(capsys):
    from hista.cli import main

    assert main(["sample", "--model", "nope", "--tasks", "builtin:arith", "--problems", "1"]) == 2
    err = capsys.readouterr().err
    assert "smollm2-135m-instruct" in err and "tiny" in err


def test_hidden_states_without_the_output_head_equal_those_of_forward(tiny):
    """``hidden_states`` (no logits; a shared prompt encoded once) gives the hidden states
    ``forward`` gives, for any layer, with shared and distinct prompts and an empty completion."""
    from hista.models import forward, hidden_states

    prompts = [[1, 2, 3, 4], [5, 6], [1, 2, 3, 4], [1, 2, 3, 4]]
    completions = [[7, 8, 9], [10, 11, 12, 13, 14], [15], []]
    for layer in (-1, -2, 0, 1):
        got = hidden_states(tiny, prompts, completions, layer=layer, batch_size=2)
        for a, b in zip(forward(tiny, prompts, completions, layer=layer).hidden, got):
            assert a.shape == b.shape
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
