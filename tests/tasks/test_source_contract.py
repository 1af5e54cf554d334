"""Contract tests over every registered task source (SPEC §7) and verifier (SPEC §6): a
component is tested here the moment it is registered (CONTRIBUTING.md)."""

from __future__ import annotations

import pytest

from hista import rewards, tasks
from hista.errors import InputError

KEYS = ("id", "problem", "answer", "verifier", "field")


@pytest.fixture(autouse=True)
def hub_offline(monkeypatch, tmp_path):
    """No network, and no Hugging Face cache written outside the test's folder."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    try:
        import datasets
    except ImportError:
        return
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")


def _example(source: tasks.TaskSource, tmp_path) -> str:
    try:
        return source.example(tmp_path)
    except NotImplementedError as exc:
        pytest.skip(f"{type(source).__name__} cannot load offline here: {exc}")


# --------------------------------------------------------------------------------------------
# task sources

@pytest.mark.parametrize("prefix", tasks.names())
def test_source_loads_its_example(prefix, tmp_path):
    source = tasks.get(prefix)
    assert isinstance(source, tasks.TaskSource)
    assert isinstance(source.description, str) and source.description and "\n" not in source.description
    rest = _example(source, tmp_path)
    source.check(rest)
    tasks.check_spec(f"{prefix}:{rest}")
    records = source.load(rest, n=2, seed=0, split="train")
    assert 1 <= len(records) <= 2
    for r in records:
        assert all(isinstance(r[k], str) and r[k] for k in KEYS), r
        assert r["verifier"] in rewards.names()
        assert isinstance(r.get("meta", {}), dict)
    assert len({r["id"] for r in records}) == len(records)
    assert tasks.load(f"{prefix}:{rest}", n=2, seed=0, split="train") == records
    assert source.load(rest, n=0, seed=0, split="train") == []


@pytest.mark.parametrize("rest", ["", "   "])
@pytest.mark.parametrize("prefix", tasks.names())
def test_source_rejects_an_empty_rest(prefix, rest):
    source = tasks.get(prefix)
    with pytest.raises(InputError):
        source.check(rest)
    with pytest.raises(InputError):
        source.load(rest, n=2, seed=0, split="train")


# --------------------------------------------------------------------------------------------
# verifiers

GARBAGE = [None, "", "x" * 200_000, "\\boxed{" * 1000, "```python\n", 3, 2.5, float("nan"), b"\\boxed{2}",
           ["\\boxed{2}"], {"answer": 2}, object()]


@pytest.mark.parametrize("kind", rewards.names())
@pytest.mark.parametrize("completion", GARBAGE, ids=lambda g: type(g).__name__)
def test_verifier_never_raises_on_malformed_output(kind, completion):
    for answer in ("2", "B", '[{"input": "", "output": "2"}]'):
        reward, reason = rewards.verify_with_reason(kind, completion, answer)
        assert isinstance(reward, float) and reward == reward
        assert isinstance(reason, str) and reason


@pytest.mark.parametrize("kind", rewards.names())
def test_verifier_is_a_two_argument_function(kind):
    fn = rewards.get(kind)
    reward, reason = fn("", "2")
    assert isinstance(float(reward), float) and isinstance(reason, str)


# --------------------------------------------------------------------------------------------
# registries

@pytest.mark.parametrize("module, name", [(rewards, "math"), (tasks, "jsonl")])
def test_taken_name_raises_and_replace_replaces(module, name):
    old = module.REGISTRY.lookup(name)
    new = type("StandIn", (old,), {}) if module is tasks else (lambda completion, answer: (1.0, "stand-in"))
    with pytest.raises(ValueError, match="already registered"):
        module.register(name)(new)
    assert module.REGISTRY.lookup(name) is old
    try:
        module.register(name, replace=True)(new)
        assert module.REGISTRY.lookup(name) is new
    finally:
        module.REGISTRY._items[name] = old
    assert module.REGISTRY.lookup(name) is old
