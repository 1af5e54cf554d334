"""Tests of the problem sources (SPEC §7): built-in generators, JSONL, HF datasets, filtering."""

from __future__ import annotations

import collections
import inspect
import json
import re
import sys
import time

import pytest

from hista import hub, rewards, tasks
from hista.errors import InputError
from hista.tasks import arith, base, builtin, choice
from hista.tasks import champ as champ_mod
from hista.tasks import gym as gym_mod
from hista.tasks import hf as hf_mod
from hista.tasks import jsonl as jsonl_mod
from hista.tasks import parts as parts_mod

KEYS = {"id", "problem", "answer", "verifier", "field"}


# --------------------------------------------------------------------------------------------
# registry

def test_list_builtin_and_preview():
    desc = tasks.list_builtin()
    assert set(desc) == {"arith", "choice"}
    assert all(isinstance(v, str) and v and "\n" not in v for v in desc.values())
    text = tasks.preview("builtin:arith?steps=2", 2)
    assert "arith-s2-m10-as-plain-seed0-test-00000" in text and "00001" in text
    assert "=>" in text


def test_public_functions_have_docstrings():
    """Every public function and method says what it does (issue 67 item 7: no whole-chapter SPEC
    citation required)."""
    for mod in (tasks, arith, choice, jsonl_mod, hf_mod, builtin, base, tasks.filter, gym_mod, champ_mod, parts_mod):
        for name, obj in vars(mod).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != mod.__name__:
                continue
            methods = vars(obj).items() if inspect.isclass(obj) else [(name, obj)]
            for meth_name, fn in methods:
                if inspect.isfunction(fn) and not meth_name.startswith("_"):
                    assert fn.__doc__ and len(fn.__doc__.split()) >= 3, f"{mod.__name__}.{meth_name}"


def test_sources_are_registered_by_prefix():
    assert tasks.names() == ["builtin", "champ", "gym", "hf", "humaneval", "jsonl"]
    assert isinstance(tasks.get("jsonl"), jsonl_mod.JsonlSource)
    assert tasks.get("builtin").load("choice", 2) == tasks.load("builtin:choice", 2)
    with pytest.raises(InputError, match="builtin, champ, gym, hf, humaneval, jsonl"):
        tasks.get("file")
    with pytest.raises(ValueError, match="already registered"):
        tasks.register("hf")(builtin.BuiltinSource)
    with pytest.raises(TypeError):
        tasks.register("test-tasks-not-a-source")(object)
    with pytest.raises(ValueError, match="prefix"):
        tasks.register("Bad:")(builtin.BuiltinSource)


@pytest.mark.parametrize("spec", ["nope:x", "arith", "builtin", "", "   ", "file:a.jsonl"])
def test_unknown_source(spec):
    with pytest.raises(InputError) as ei:
        tasks.load(spec, 3)
    msg = str(ei.value)
    assert "builtin:" in msg and "jsonl:" in msg and "hf:" in msg
    assert "builtin:arith" in msg and "builtin:choice" in msg


def test_unknown_builtin_and_bad_args():
    with pytest.raises(InputError, match="arith, choice"):
        tasks.load("builtin:nope")
    with pytest.raises(InputError) as ei:
        tasks.load("builtin:arith", 3, split="holdout")
    assert ei.value.field == "split" and "train" in str(ei.value)
    with pytest.raises(InputError):
        tasks.load("builtin:arith", -1)
    with pytest.raises(InputError):
        tasks.load("builtin:choice", 3, seed="x")  # type: ignore[arg-type]
    assert tasks.load("builtin:arith", 0) == []
    assert len(tasks.load("builtin:choice")) == choice.DEFAULT_N


# --------------------------------------------------------------------------------------------
# built-ins: determinism, ids, splits

BUILTIN_SPECS = [
    "builtin:arith",
    "builtin:arith?steps=1&style=plain",
    "builtin:arith?steps=3&ops=+-*&max_value=50",
    "builtin:choice",
    "builtin:choice?options=3&kind=compare",
]


@pytest.mark.parametrize("spec", BUILTIN_SPECS)
def test_builtin_records_and_determinism(spec):
    a = tasks.load(spec, 40, seed=3)
    b = tasks.load(spec, 40, seed=3)
    assert a == b
    for r in a:
        assert KEYS <= set(r)
        assert all(isinstance(r[k], str) and r[k] for k in KEYS)
        assert r["verifier"] in ("math", "choice")
    assert len({r["id"] for r in a}) == len(a)
    other = tasks.load(spec, 40, seed=4)
    assert [r["problem"] for r in other] != [r["problem"] for r in a]
    assert {r["id"] for r in other}.isdisjoint(r["id"] for r in a)


@pytest.mark.parametrize("spec", BUILTIN_SPECS)
def test_stable_ids_whatever_n(spec):
    small = tasks.load(spec, 5, seed=1, split="train")
    big = tasks.load(spec, 60, seed=1, split="train")
    assert big[:5] == small
    assert big[17]["id"].endswith("-train-00017")


def test_id_format():
    r = tasks.load("builtin:arith?steps=2&max_value=20&style=word", 18)[17]
    assert r["id"] == "arith-s2-m20-as-word-seed0-test-00017"
    r = tasks.load("builtin:choice?options=3", 3, seed=5, split="train")[2]
    assert r["id"] == "choice-o3-mix-seed5-train-00002"


@pytest.mark.parametrize("spec", ["builtin:arith", "builtin:arith?steps=1&style=plain",
                                  "builtin:choice", "builtin:choice?options=3&kind=opposite"])
def test_disjoint_splits(spec):
    train = {r["problem"] for r in tasks.load(spec, 2000, split="train")}
    test = {r["problem"] for r in tasks.load(spec, 2000, split="test")}
    assert train and test
    assert train.isdisjoint(test)
    # disjoint whatever the seeds, since the partition depends on the text alone
    test_other_seed = {r["problem"] for r in tasks.load(spec, 500, seed=9, split="test")}
    assert train.isdisjoint(test_other_seed)
    val = {r["problem"] for r in tasks.load(spec, 300, split="validation")}
    assert val.isdisjoint(train) and val.isdisjoint(test)


# --------------------------------------------------------------------------------------------
# arith

@pytest.mark.parametrize("split", ["train", "test", "validation"])
def test_arith_parts_poses_independent_problems_scored_all_or_nothing(split):
    """``parts=3``: three problems of the same knobs in one prompt, their answers joined by
    "; "; the records are seeded by (options, seed, split, index) and verified by math-parts."""
    from hista import rewards

    recs = tasks.load("builtin:arith?steps=2&parts=3", 20, seed=4, split=split)
    assert recs == tasks.load("builtin:arith?steps=2&parts=3", 20, seed=4, split=split)
    assert recs != tasks.load("builtin:arith?steps=2&parts=3", 20, seed=5, split=split)
    assert all(r["id"].startswith(f"arith-s2-m10-as-plain-p3-seed4-{split}-") for r in recs)
    for r in recs:
        assert r["verifier"] == "math-parts" and r["field"] == "number"
        parts = r["meta"]["parts"]
        assert len(parts) == 3 and r["problem"].startswith("Solve the 3 problems below.")
        assert r["answer"] == "; ".join(str(p["intermediates"][-1]) for p in parts)
        for k, part in enumerate(parts, start=1):
            assert part["intermediates"] == _recompute(part)
            assert f"({k}) Start with {part['start']}." in r["problem"]
        answers = [str(p["intermediates"][-1]) for p in parts]
        right = " ".join(f"\\boxed{{{a}}}" for a in answers)
        assert rewards.verify("math-parts", right, r["answer"]) == 1.0
        wrong = " ".join(f"\\boxed{{{a}}}" for a in answers[:2] + [str(int(answers[2]) + 1)])
        assert rewards.verify("math-parts", wrong, r["answer"]) == 0.0


def test_arith_parts_1_is_the_plain_task():
    assert tasks.load("builtin:arith?steps=2&parts=1", 5) == tasks.load("builtin:arith?steps=2", 5)


@pytest.mark.parametrize("value", ["0", "10", "x"])
def test_arith_parts_out_of_range_is_refused(value):
    with pytest.raises(InputError, match="parts"):
        tasks.check_spec(f"builtin:arith?parts={value}")


def test_arith_score_share_pays_the_share_of_parts_right():
    """``score=share`` (issue 65, amendment 4): problems of their own (the id prefix, which seeds
    them, names the option), verified by math-parts-share, which pays k / N for k of N parts right."""
    from hista import rewards

    share = tasks.load("builtin:arith?steps=1&ops=+&parts=4&score=share", 10, seed=1)
    assert all(r["id"].startswith("arith-s1-m10-a-plain-p4-share-seed1-") for r in share)
    for r in share:
        assert r["verifier"] == "math-parts-share"
        answers = r["answer"].split("; ")
        for k in range(5):
            given = answers[:k] + [str(int(a) + 1) for a in answers[k:]]
            assert rewards.verify("math-parts-share", " ".join(f"\\boxed{{{a}}}" for a in given),
                                  r["answer"]) == k / 4
    with pytest.raises(InputError, match="score"):
        tasks.load("builtin:arith?score=share", 1)
    with pytest.raises(InputError, match="score"):
        tasks.check_spec("builtin:arith?parts=2&score=some")


def _recompute(meta):
    cur, out = meta["start"], []
    for op, b in zip(meta["ops"], meta["operands"]):
        cur = {"+": cur + b, "-": cur - b, "*": cur * b}[op]
        out.append(cur)
    return out


ARITH_CASES = [(steps, ops, style, mv) for steps in (1, 2, 3, 5) for ops in ("+-", "+-*", "-", "*")
               for style in ("word", "plain") for mv in (5, 20)]


@pytest.mark.parametrize("steps,ops,style,mv", ARITH_CASES)
def test_arith_intermediates_and_answer(steps, ops, style, mv):
    recs = tasks.load(f"builtin:arith?steps={steps}&ops={ops}&style={style}&max_value={mv}", 25)
    for r in recs:
        meta = r["meta"]
        assert r["verifier"] == "math" and r["field"] == "number"
        assert meta["steps"] == steps == len(meta["ops"]) == len(meta["intermediates"])
        assert set(meta["ops"]) <= set(ops)
        inter = meta["intermediates"]
        assert inter == _recompute(meta)
        assert r["answer"] == str(inter[-1])
        assert all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in inter)
        assert isinstance(meta["start"], int) and meta["start"] >= 1
        for op, b in zip(meta["ops"], meta["operands"]):
            assert 1 <= b <= mv and (op != "*" or 2 <= b <= 9)
        # the numbers of the problem are in its text; the intermediates are in the solution
        words = re.findall(r"\d+", r["problem"])
        assert words == [str(meta["start"])] + [str(b) for b in meta["operands"]]
        assert all(str(v) in meta["solution"] for v in inter)
        if style == "plain":
            assert r["problem"].startswith(f"Start with {meta['start']}.")
            assert r["problem"].endswith("What number do you get?")
        else:
            assert r["problem"].endswith("have now?")


def test_arith_example_wording():
    r = tasks.load("builtin:arith?steps=2&style=plain&ops=+*", 60)
    texts = [x["problem"] for x in r]
    expr = tasks.load("builtin:arith?steps=3&style=expr&ops=+-*", 60)
    for x in expr:  # the expression, evaluated by Python's own precedence, gives the answer
        assert re.fullmatch(r"What is [\d +\-*()]+\?", x["problem"])
        assert str(eval(x["problem"][8:-1])) == x["answer"]
    assert any(re.fullmatch(r"Start with \d+\. Add \d+\. Then multiply by \d+\. "
                            r"What number do you get\?", t) for t in texts)
    word = tasks.load("builtin:arith?steps=1&style=word", 30)
    assert all(len(x["problem"].split()) < 25 for x in word)


@pytest.mark.parametrize("query,field", [
    ("stepz=2", "stepz"),
    ("steps=two", "steps"),
    ("steps=0", "steps"),
    ("steps=99", "steps"),
    ("max_value=1", "max_value"),
    ("ops=+/", "ops"),
    ("ops=", "ops"),
    ("style=poem", "style"),
    ("steps=2&steps=3", "steps"),
    ("steps", "steps"),
])
def test_arith_knob_errors(query, field):
    with pytest.raises(InputError) as ei:
        tasks.load(f"builtin:arith?{query}", 3)
    assert ei.value.field == field
    msg = str(ei.value)
    assert repr(field) in msg or field in msg
    if field == "stepz" or query == "steps":
        assert "steps, max_value, ops, style" in msg


# --------------------------------------------------------------------------------------------
# choice

@pytest.mark.parametrize("k", [3, 4])
def test_choice_letters_uniform(k):
    recs = tasks.load(f"builtin:choice?options={k}", 2000)
    counts = collections.Counter(r["answer"] for r in recs)
    assert set(counts) == set("ABCD"[:k])
    expected = len(recs) / k
    for c in counts.values():
        assert abs(c - expected) < 0.15 * expected, counts
    for r in recs:
        assert r["verifier"] == "choice" and r["field"] == "choice"
        lines = r["problem"].split("\n")
        opts = lines[1:]
        assert [o[:3] for o in opts] == [f"{L}) " for L in "ABCD"[:k]]
        assert [o[3:] for o in opts] == r["meta"]["options"]
        assert len(set(r["meta"]["options"])) == k
        assert r["answer"] == "ABCD"[r["meta"]["correct"]]
        assert not re.search(r"\d", r["problem"])


def test_choice_kinds_and_mix():
    kinds = collections.Counter(r["meta"]["kind"] for r in tasks.load("builtin:choice", 400))
    assert set(kinds) == set(choice.KINDS)
    for kind in choice.KINDS:
        recs = tasks.load(f"builtin:choice?kind={kind}", 20)
        assert {r["meta"]["kind"] for r in recs} == {kind}


def test_choice_answers_are_right():
    # comparisons: rebuild the order from the stated facts
    rel = {m: (1, t, b) for m, _, t, b in choice.RELATIONS}
    rel.update({less: (-1, t, b) for _, less, t, b in choice.RELATIONS})
    for r in tasks.load("builtin:choice?kind=compare", 200):
        text, opts = r["problem"].split("\n")[0], r["meta"]["options"]
        facts = re.findall(r"(\w+) is (\w+) than (\w+)\.", text)
        greater = {}
        for a, word, b in facts:
            sign = rel[word][0]
            hi_, lo_ = (a, b) if sign > 0 else (b, a)
            greater[hi_] = lo_
        people = set(opts)
        top = (people - set(greater.values())).pop()
        bottom = (people - set(greater)).pop()
        q = re.search(r"Who is the (\w+)\?", text).group(1)
        want = top if any(q == t for _, _, t, _ in choice.RELATIONS) else bottom
        assert opts[r["meta"]["correct"]] == want
    for r in tasks.load("builtin:choice?kind=opposite", 200):
        word = re.search(r"opposite of (\w+)\?", r["problem"]).group(1)
        pairs = {a: b for a, b in choice.OPPOSITES} | {b: a for a, b in choice.OPPOSITES}
        assert r["meta"]["options"][r["meta"]["correct"]] == pairs[word]
    members = {m: c for c, (_, ms) in choice.CATEGORIES.items() for m in ms}
    for r in tasks.load("builtin:choice?kind=category", 200):
        phrase = re.search(r"is (not )?(.+)\?", r["problem"].split("\n")[0])
        cat = next(c for c, (p, _) in choice.CATEGORIES.items() if p == phrase.group(2))
        inside = [members[o] == cat for o in r["meta"]["options"]]
        if phrase.group(1):
            assert inside.count(False) == 1 and not inside[r["meta"]["correct"]]
        else:
            assert inside.count(True) == 1 and inside[r["meta"]["correct"]]


@pytest.mark.parametrize("query,field", [("options=5", "options"), ("options=2", "options"),
                                         ("kind=riddle", "kind"), ("colour=red", "colour")])
def test_choice_knob_errors(query, field):
    with pytest.raises(InputError) as ei:
        tasks.load(f"builtin:choice?{query}", 3)
    assert ei.value.field == field and field in str(ei.value)
    if field == "colour":
        assert "options, kind" in str(ei.value)
    if field == "kind":
        assert "compare" in str(ei.value) and "mix" in str(ei.value)


# --------------------------------------------------------------------------------------------
# jsonl

def _write(tmp_path, lines, name="probs.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def test_jsonl_happy_path(tmp_path):
    p = _write(tmp_path, [
        json.dumps({"problem": "1+1?", "answer": "2"}),
        "",
        json.dumps({"id": "q7", "problem": "Pick.", "answer": "B", "verifier": "choice",
                    "field": "logic", "source": "me"}),
        "   ",
        json.dumps({"problem": "2*3?", "answer": 6, "verifier": "math"}),
        json.dumps({"id": 12, "problem": "code", "answer": "[]", "verifier": "code",
                    "meta": {"x": 1}}),
    ])
    recs = tasks.load(f"jsonl:{p}")
    assert [r["id"] for r in recs] == ["probs-1", "q7", "probs-5", "12"]
    assert recs[0] == {"id": "probs-1", "problem": "1+1?", "answer": "2", "verifier": "math",
                       "field": "default"}
    assert recs[1]["verifier"] == "choice" and recs[1]["field"] == "logic"
    assert recs[1]["meta"] == {"source": "me"}
    assert recs[2]["answer"] == "6"
    assert recs[3]["meta"] == {"x": 1}
    assert tasks.load(f"jsonl:{p}", n=2) == recs[:2]


JSONL_ERRORS = [
    ('{"problem": "x", "answer": "1"', None, "bad JSON"),
    ('[1, 2]', None, "JSON object"),
    ('{"answer": "1"}', "problem", "missing"),
    ('{"problem": "x"}', "answer", "missing"),
    ('{"problem": 5, "answer": "1"}', "problem", "string"),
    ('{"problem": "x", "answer": [1]}', "answer", "string or a number"),
    ('{"problem": "x", "answer": true}', "answer", "string or a number"),
    ('{"problem": "x", "answer": "1", "verifier": "judge"}', "verifier", "unknown verifier"),
    ('{"problem": "x", "answer": "1", "verifier": 3}', "verifier", "string"),
    ('{"problem": "x", "answer": "1", "field": 3}', "field", "string"),
    ('{"problem": "x", "answer": "1", "id": [1]}', "id", "string"),
    ('{"problem": "x", "answer": "1", "id": "a"}', "id", "duplicate"),
]


@pytest.mark.parametrize("bad,field,words", JSONL_ERRORS)
def test_jsonl_errors(tmp_path, bad, field, words):
    good = [json.dumps({"id": "a", "problem": "p", "answer": "1"}), "",
            json.dumps({"problem": "q", "answer": "2"})]
    p = _write(tmp_path, good + [bad, json.dumps({"problem": "r", "answer": "3"})])
    with pytest.raises(InputError) as ei:
        tasks.load(f"jsonl:{p}")
    err, msg = ei.value, str(ei.value)
    assert err.path == str(p) and err.line == 4 and err.field == field
    assert f"{p}:4" in msg
    assert words in msg
    if field is not None:
        assert field in msg
    if words == "duplicate":
        assert "line 1" in msg


@pytest.fixture
def always_one():
    """A verifier registered for one test only."""
    rewards.register("test-tasks-always-one")(lambda completion, answer: (1.0, "always"))
    yield "test-tasks-always-one"
    del rewards.REGISTRY._items["test-tasks-always-one"]


def test_jsonl_accepts_any_registered_verifier(tmp_path, always_one):
    p = _write(tmp_path, [json.dumps({"problem": "Anything?", "answer": "yes", "verifier": always_one})])
    (rec,) = tasks.load(f"jsonl:{p}")
    assert rec["verifier"] == always_one
    assert rewards.verify(rec["verifier"], "no", rec["answer"]) == 1.0


def test_jsonl_missing_file_and_empty_path(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        tasks.load(f"jsonl:{tmp_path / 'nope.jsonl'}")
    with pytest.raises(InputError, match="path"):
        tasks.load("jsonl:")
    p = tmp_path / "bin.jsonl"
    p.write_bytes(b'{"problem": "x", "answer": "1"}\n\xff\xfe\n')
    with pytest.raises(InputError) as ei:
        tasks.load(f"jsonl:{p}")
    assert ei.value.line == 2 and "UTF-8" in str(ei.value)


# --------------------------------------------------------------------------------------------
# hf

def _fake(rows, calls=None):
    def load_rows(name, config, split):
        if calls is not None:
            calls.append((name, config, split))
        return rows
    return load_rows


def test_hf_parse_spec():
    assert hf_mod.parse_spec("openai/gsm8k:main@test") == ("openai/gsm8k", "main", "test")
    assert hf_mod.parse_spec("gsm8k") == ("gsm8k", None, None)
    assert hf_mod.parse_spec("math500@test") == ("math500", None, "test")
    with pytest.raises(InputError, match="gsm8k"):
        tasks.load("hf:")


def test_hf_gsm8k_mapping(monkeypatch):
    calls = []
    rows = [{"question": "How many?", "answer": "3 + 4 = 7\n#### 1,234"},
            {"question": "Q2", "answer": "so #### 5"}]
    monkeypatch.setattr(hf_mod, "load_rows", _fake(rows, calls))
    recs = tasks.load("hf:gsm8k", split="train")
    assert calls == [("openai/gsm8k", "main", "train")]
    assert recs[0]["answer"] == "1234" and recs[0]["problem"] == "How many?"
    assert recs[0]["id"] == "gsm8k-train-00000" and recs[0]["verifier"] == "math"
    assert recs[1]["answer"] == "5"
    tasks.load("hf:openai/gsm8k:main@test", n=1)
    assert calls[-1] == ("openai/gsm8k", "main", "test")


def test_hf_math500_dapo_openr1_generic(monkeypatch):
    calls = []
    monkeypatch.setattr(hf_mod, "load_rows", _fake(
        [{"problem": "Find x.", "answer": "\\frac{1}{2}", "subject": "Algebra", "level": 2}],
        calls))
    r = tasks.load("hf:math500", split="train")[0]  # single-split dataset: uses 'test'
    assert calls[-1] == ("HuggingFaceH4/MATH-500", None, "test")
    assert r["field"] == "Algebra" and r["answer"] == "\\frac{1}{2}"

    prompt = (hf_mod.DAPO_PREFIX + "\n\nWhat is 6*7?\n\n" + hf_mod.DAPO_SUFFIX)
    dapo_row = {"prompt": [{"role": "user", "content": prompt}],
                "reward_model": {"ground_truth": "42", "style": "rule"},
                "extra_info": {"index": "abc"}}
    monkeypatch.setattr(hf_mod, "load_rows", _fake([dapo_row, dapo_row, dapo_row], calls))
    recs = tasks.load("hf:dapo-math")
    assert calls[-1] == ("BytedTsinghua-SIA/DAPO-Math-17k", None, "train")
    assert len(recs) == 1  # repeated rows are dropped
    assert recs[0]["problem"] == "What is 6*7?" and recs[0]["answer"] == "42"

    monkeypatch.setattr(hf_mod, "load_rows", _fake(
        [{"problem": "P", "answer": "3", "problem_type": "Geometry", "uuid": "u"}], calls))
    r = tasks.load("hf:open-r1/OpenR1-Math-220k")[0]
    assert r["field"] == "Geometry" and r["answer"] == "3"

    monkeypatch.setattr(hf_mod, "load_rows", _fake(
        [{"question": "Q", "answer": "A", "category": "Physics"}], calls))
    r = tasks.load("hf:someone/webinstruct@train")[0]
    assert (r["problem"], r["answer"], r["field"]) == ("Q", "A", "Physics")
    assert calls[-1] == ("someone/webinstruct", None, "train")

    monkeypatch.setattr(hf_mod, "load_rows", _fake([{"text": "hello", "label": 1}], calls))
    with pytest.raises(InputError) as ei:
        tasks.load("hf:someone/other")
    assert "openai/gsm8k" in str(ei.value) and "MATH-500" in str(ei.value)


def test_hf_unreachable_from_loader(monkeypatch):
    def boom(name, config, split):
        raise hf_mod.HubUnreachable("Couldn't reach the Hub")
    monkeypatch.setattr(hf_mod, "load_rows", boom)
    with pytest.raises(InputError) as ei:
        tasks.load("hf:gsm8k", 3)
    msg = str(ei.value)
    assert "could not reach the Hugging Face Hub" in msg and "jsonl:" in msg


def test_hf_without_datasets(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    with pytest.raises(InputError, match=r"pip install 'hista\[hf\]'"):
        tasks.load("hf:gsm8k", 3)


@pytest.mark.parametrize("how", ["env", "probe"])
def test_hf_offline_real_datasets(monkeypatch, how):
    datasets = pytest.importorskip("datasets")
    hub_constants = pytest.importorskip("huggingface_hub.constants")
    before = (datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE)
    if how == "env":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:
        for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setattr(hub, "reachable", lambda: False)  # the probe models and datasets share
    t0 = time.monotonic()
    with pytest.raises(InputError) as ei:
        tasks.load("hf:hista-test/surely-not-cached-dataset", 3)
    assert time.monotonic() - t0 < 30
    msg = str(ei.value)
    assert "could not reach the Hugging Face Hub" in msg and "jsonl:" in msg
    # the forced offline mode is undone afterwards
    assert (datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE) == before


# --------------------------------------------------------------------------------------------
# filter

def test_filter_by_accuracy():
    probs = [{"id": str(i)} for i in range(6)]
    acc = [0.0, 0.1, 0.5, 0.8, 0.85, 1.0]
    assert [p["id"] for p in tasks.filter_by_accuracy(probs, acc)] == ["1", "2", "3"]
    assert [p["id"] for p in tasks.filter_by_accuracy(probs, acc, lo=0.0, hi=0.0)] == ["0"]
    near = [16 / 20 + 1e-12, 0.7999999, 2, 2, 2, 2]
    assert tasks.filter_by_accuracy(probs, near) == probs[:2]
    np = pytest.importorskip("numpy")
    assert len(tasks.filter_by_accuracy(probs, np.array(acc, dtype=np.float32))) == 3
    with pytest.raises(InputError, match="6 problems but 5"):
        tasks.filter_by_accuracy(probs, acc[:5])
    with pytest.raises(InputError) as ei:
        tasks.filter_by_accuracy(probs, acc, lo=0.9, hi=0.1)
    assert ei.value.field == "lo"
    with pytest.raises(InputError):
        tasks.filter_by_accuracy(probs, acc[:5] + [float("nan")])
    assert tasks.filter_by_accuracy([], []) == []


def test_math_mapping_takes_the_last_boxed_answer():
    from hista.tasks.hf import math_record

    row = {"problem": "Half of 1?", "solution": "First \\boxed{2}, no: \\boxed{\\frac{1}{2}}.", "type": "Algebra"}
    assert math_record(row)[:3] == ("Half of 1?", "\\frac{1}{2}", "Algebra")
    assert math_record({"problem": "x", "solution": "no box"}) is None


@pytest.mark.parametrize("spec, ok", [("builtin:arith?steps=1", True), ("hf:math@train", True),
                                      ("hf:TIGER-Lab/WebInstruct-verified", True), ("hf:nosuch", False),
                                      ("builtin:nope", False), ("jsonl:/no/such/file.jsonl", False)])
def test_check_spec_needs_no_download(spec, ok):
    from hista.errors import InputError
    from hista.tasks import check_spec

    if ok:
        check_spec(spec)
    else:
        with pytest.raises(InputError):
            check_spec(spec)


def test_check_spec_validates_a_jsonl_file(tmp_path):
    p = _write(tmp_path, [json.dumps({"problem": "p", "answer": "1"}), json.dumps({"problem": "q"})])
    with pytest.raises(InputError) as ei:
        tasks.check_spec(f"jsonl:{p}")
    assert ei.value.line == 2 and ei.value.field == "answer"


@pytest.mark.parametrize("name", ["arith?steps=1", "choice"])
def test_explain_option_asks_for_a_detailed_answer_and_leaves_the_default_alone(name):
    sep = "&" if "?" in name else "?"
    plain = tasks.load(f"builtin:{name}", n=5, seed=3)
    default = tasks.load(f"builtin:{name}{sep}explain=no", n=5, seed=3)
    long = tasks.load(f"builtin:{name}{sep}explain=yes", n=5, seed=3)
    assert [p["problem"] for p in default] == [p["problem"] for p in plain]
    assert [p["id"] for p in default] == [p["id"] for p in plain]
    assert all("-explain-" in p["id"] and "in detail" in p["problem"] for p in long)
    assert not any("-explain-" in p["id"] for p in plain)


def test_explain_option_rejects_other_values():
    with pytest.raises(InputError, match="explain"):
        tasks.load("builtin:arith?explain=maybe", n=1)
