"""The vllm engine's request building and output parsing (SPEC §7), on CPU.

Outputs come from ``tests/data/vllm_outputs.json`` (its ``_doc`` says how they were written),
built as vLLM's own ``CompletionOutput`` / ``Logprob`` objects when vLLM can be imported and as
plain objects with the same attributes otherwise. Nothing here runs vLLM's model code: that
needs a GPU (bench/gpu_check.sh)."""

import gc
import json
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from hista.errors import InputError
from hista.models import load
from hista.rollout import SamplingConfig
from hista.rollout.config import sample_seeds
from hista.rollout.engine import eos_ids
from hista.rollout.engines import check_engine, load_model, make_engine
from hista.rollout.vllm_engine import (
    VLLMEngine,
    check_available,
    completion_of,
    model_source,
    request_settings,
)

FIXTURE = json.loads((Path(__file__).parents[1] / "data" / "vllm_outputs.json").read_text())

try:
    from vllm.logprobs import Logprob as _Logprob
    from vllm.outputs import CompletionOutput as _CompletionOutput
    VLLM = True
except Exception:  # noqa: BLE001 - not installed, or installed without what it needs to import
    VLLM = False


def _completion_output(recorded: dict):
    """One recorded output as vLLM's classes (when importable) or plain objects."""
    positions = [{int(t): (_Logprob(**entry) if VLLM else SimpleNamespace(**entry)) for t, entry in pos.items()}
                 for pos in recorded["logprobs"]]
    fields = {**recorded, "logprobs": positions}
    return _CompletionOutput(**fields) if VLLM else SimpleNamespace(**fields)


def test_the_fixture_uses_vllm_classes_when_vllm_imports():
    out = _completion_output(FIXTURE["requests"][0]["output"])
    assert (type(out).__module__ == "vllm.outputs") == VLLM


@pytest.mark.parametrize("case", FIXTURE["requests"], ids=[c["name"] for c in FIXTURE["requests"]])
def test_outputs_parse_into_completion_ids_and_sampled_token_log_probs(case):
    tokens, logprobs = completion_of(_completion_output(case["output"]), eos=FIXTURE["eos"], greedy=False)
    assert tokens == case["expected"]["completion_ids"]
    assert logprobs == case["expected"]["logprobs"]


def test_a_completion_ends_at_its_first_eos_and_greedy_log_probs_are_zero():
    recorded = dict(FIXTURE["requests"][0]["output"], token_ids=[378, 2, 314])
    recorded["logprobs"] = recorded["logprobs"][:3]
    tokens, logprobs = completion_of(_completion_output(recorded), eos=[2], greedy=True)
    assert tokens == [378, 2] and logprobs == [0.0, 0.0]


def test_missing_log_probs_are_an_error_not_a_guess():
    recorded = FIXTURE["requests"][1]["output"]
    with pytest.raises(ValueError, match="log-probs for 0 of 4"):
        completion_of(SimpleNamespace(token_ids=recorded["token_ids"], logprobs=None), eos=[2], greedy=False)
    shifted = dict(recorded, logprobs=[{"9": {"logprob": -1.0, "rank": 1, "decoded_token": None}}] * 4)
    with pytest.raises(ValueError, match="sampled token 216 at completion position 0"):
        completion_of(_completion_output(shifted), eos=[2], greedy=False)


def test_requests_sample_one_sequence_at_the_temperature_with_the_models_stop_ids():
    config = SamplingConfig(temperature=0.7, max_new_tokens=64)
    settings = request_settings(config, seed=123, eos=[7, 2], max_new_tokens=40)
    assert settings == {"n": 1, "temperature": 0.7, "top_p": 1.0, "seed": 123, "max_tokens": 40,
                        "stop_token_ids": [2, 7], "ignore_eos": False, "logprobs": 0, "detokenize": False,
                        "skip_special_tokens": False}
    greedy = request_settings(SamplingConfig(temperature=0.0), seed=1, eos=[2], max_new_tokens=5)
    assert greedy["temperature"] == 0.0 and greedy["logprobs"] is None
    if VLLM:  # vLLM accepts every key
        from vllm import SamplingParams

        assert SamplingParams(**settings).logprobs == 0


def test_top_p_below_one_is_refused_naming_the_field():
    with pytest.raises(InputError, match="top_p 1 only") as info:
        request_settings(SamplingConfig(top_p=0.9), seed=0, eos=[2], max_new_tokens=4)
    assert info.value.field == "top_p"


def test_sample_seeds_depend_on_the_call_seed_prompt_and_sample_only():
    seeds = sample_seeds(20, 20, 5)
    assert len(set(seeds)) == 400 and all(0 <= s < 2**31 for s in seeds)
    assert seeds == sample_seeds(20, 20, 5) != sample_seeds(20, 20, 6)
    assert sample_seeds(20, 20, 5)[3 * 20 + 4] == sample_seeds(4, 20, 5)[3 * 20 + 4]  # not the other prompts
    named = sample_seeds(2, 3, prompt_seeds=[7, 8])
    assert named[3:] == sample_seeds(1, 3, prompt_seeds=[8]) and named != sample_seeds(2, 3, 7)


class _Replay:
    """vLLM's ``LLM.generate`` replaying the fixture's outputs in order, keeping the requests."""

    def __init__(self, outputs):
        self.outputs, self.calls = outputs, []

    def generate(self, prompts, params, use_tqdm):
        self.calls.append((prompts, params))
        return [SimpleNamespace(outputs=[o]) for o in self.outputs[: len(prompts)]]


def _replaying_engine(tiny, config):
    engine = object.__new__(VLLMEngine)  # no vLLM model: the adapter around LLM.generate is under test
    engine.lm, engine.config, engine.tensor_parallel_size, engine._version = tiny, config, 1, "replay"
    engine.llm = _Replay([_completion_output(c["output"]) for c in FIXTURE["requests"]])
    engine._sampling_params = lambda **kw: kw
    engine._tokens_prompt = lambda prompt_token_ids: {"prompt_token_ids": prompt_token_ids}
    return engine


def test_outputs_become_rollouts_with_text_offsets_and_log_probs(tiny):
    engine = _replaying_engine(tiny, SamplingConfig(temperature=0.7, max_new_tokens=16))
    prompts = [FIXTURE["requests"][0]["prompt_token_ids"], FIXTURE["requests"][2]["prompt_token_ids"]]
    seen = []
    groups = engine.generate_from_ids(prompts[:1], 2, seed=9, prompt_texts=["p"], progress=seen.append)
    (sent, params), = engine.llm.calls
    assert [p["prompt_token_ids"] for p in sent] == [prompts[0], prompts[0]]
    assert [p["seed"] for p in params] == sample_seeds(1, 2, 9)
    assert {p["max_tokens"] for p in params} == {16} and seen == [2]
    assert len(groups) == 1 and len(groups[0]) == 2
    for rollout, case in zip(groups[0], FIXTURE["requests"]):
        assert rollout.prompt_ids == prompts[0] and rollout.prompt_text == "p"
        assert rollout.completion_ids == case["expected"]["completion_ids"]
        assert rollout.logprobs == case["expected"]["logprobs"]
        text = tiny.tokenizer.decode(rollout.completion_ids, skip_special_tokens=True)
        assert rollout.completion_text == text and len(rollout.offsets) == len(rollout.completion_ids)
        assert rollout.offsets[-1][1] == len(text)
    capped = engine.generate_from_ids(prompts, 1, seed=9, max_new_tokens=3)
    assert [len(g) for g in capped] == [1, 1] and {p["max_tokens"] for p in engine.llm.calls[-1][1]} == {3}
    other = engine.with_config(SamplingConfig(temperature=0.0))
    assert other.llm is engine.llm and other.config.temperature == 0.0 and engine.config.temperature == 0.7
    assert engine.identity()["name"] == "vllm" and engine.identity()["vllm"] == "replay"


def test_without_vllm_the_engine_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm raises ImportError
    with pytest.raises(InputError, match=r"pip install 'hista\[vllm\]'") as info:
        check_available()
    assert info.value.field == "engine"


def test_without_a_gpu_the_engine_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(InputError, match="needs a CUDA GPU"):
        check_available()
    with pytest.raises(InputError, match="needs a CUDA GPU"):  # before any model loads
        load_model("vllm", "no-such-model")


def test_engine_names_and_tensor_parallel_sizes_are_checked():
    check_engine("hf")
    check_engine("vllm", 4)
    with pytest.raises(InputError, match="unknown engine 'sglang'"):
        check_engine("sglang")
    with pytest.raises(InputError, match="vllm engine option") as info:
        check_engine("hf", 2)
    assert info.value.field == "tensor_parallel_size"
    with pytest.raises(InputError, match=">= 1"):
        check_engine("vllm", 0)


def test_model_sources_for_vllm(tiny, tmp_path):
    assert model_source(SimpleNamespace(name="Qwen/Qwen2.5-0.5B", model=None)) == "Qwen/Qwen2.5-0.5B"
    assert model_source(SimpleNamespace(name=str(tmp_path), model=None)) == str(tmp_path.resolve())
    folder = Path(model_source(tiny))
    saved = load(str(folder), device="cpu")
    for a, b in zip(saved.model.parameters(), tiny.model.parameters()):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    own = load("tiny")  # the temporary folder lives as long as the model it was saved from
    folder = Path(model_source(own))
    assert (folder / "config.json").exists()
    del own
    gc.collect()
    assert not folder.exists()


def test_a_tokenizer_only_load_gives_tokenizer_and_revision(tiny, tmp_path):
    tiny.model.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    lm = load(str(tmp_path), weights=False)
    assert lm.model is None and lm.revision == f"path:{tmp_path.resolve()}"
    assert lm.tokenizer("Hi")["input_ids"] == tiny.tokenizer("Hi")["input_ids"]
    assert lm.generation_config is not None and eos_ids(lm) == eos_ids(tiny)  # the EOS ids without the weights


def test_the_hf_engine_identity_names_its_libraries(tiny):
    import transformers

    engine = make_engine("hf", tiny, SamplingConfig())
    assert engine.identity() == {"name": "hf", "transformers": transformers.__version__, "torch": torch.__version__}
    assert engine.with_config(SamplingConfig(temperature=0.0)).config.temperature == 0.0
