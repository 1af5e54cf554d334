"""`hista eval` and `hista eval compare` (SPEC §10): metrics by hand and by enumeration, greedy
as one sample, resuming an interrupted evaluation, hista train checkpoints, bad input."""

import copy
import itertools
import json
import math

import pytest
import yaml

from hista import provenance
from hista.cli import main
from hista.errors import InputError
from hista.evaluation import EvalConfig, compare, evaluate, pass_at_k, store
from hista.evaluation.metrics import bootstrap, problem_score
from hista.evaluation.report import result_markdown
from hista.evaluation.run import FORMAT
from hista.evaluation.summary import summarise
from hista.jsonio import cut_unterminated


@pytest.mark.parametrize("argv", [["eval"], ["eval", "compare"]])
def test_help(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv + ["--help"])
    assert exit_.value.code == 0 and "usage: hista eval" in capsys.readouterr().out


# ---- metrics --------------------------------------------------------------------------------

@pytest.mark.parametrize("n", range(1, 8))
def test_pass_at_k_equals_enumeration_of_every_k_subset(n):
    for c in range(n + 1):
        correct = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(correct, k))
            expected = sum(any(s) for s in subsets) / len(subsets)
            assert math.isclose(pass_at_k(n, c, k), expected, rel_tol=0, abs_tol=1e-12), (n, c, k)


@pytest.mark.parametrize("n, c, k", [(4, 1, 0), (4, 1, 5), (4, 5, 2), (3, -1, 1), (3.0, 1, 1)])
def test_pass_at_k_refuses_impossible_counts(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def _sample(reward, tokens=10, reason=None, truncated=False):
    return {"text": "x", "tokens": tokens, "truncated": truncated, "reward": float(reward),
            "reason": reason or ("correct" if reward else "wrong answer: got 3")}


def _record(benchmark, category, pid, samples):
    return {"kind": "problem", "key": f"{benchmark}/{pid}", "benchmark": benchmark, "category": category, "id": pid,
            "problem": f"problem {pid}", "answer": "4", "verifier": "math", "samples": samples}


#: sampled benchmark "A" (math, 4 samples) and greedy benchmark "B" (general, 1 sample)
HAND = [
    _record("A", "math", "p1", [_sample(1), _sample(0), _sample(0, reason="no answer found"), _sample(0)]),
    _record("A", "math", "p2", [_sample(1), _sample(1), _sample(0), _sample(0, tokens=30, truncated=True)]),
    _record("A", "math", "p3", [_sample(0), _sample(0), _sample(0), _sample(0)]),
    _record("B", "general", "q1", [_sample(1, tokens=4)]),
    _record("B", "general", "q2", [_sample(0, tokens=6, reason="no choice found")]),
]
HAND_BENCHMARKS = [{"name": "A", "category": "math", "temperature": 0.7, "samples": 4},
                   {"name": "B", "category": "general", "temperature": 0.0, "samples": 1}]


def test_summary_of_hand_made_records():
    s = summarise(HAND, HAND_BENCHMARKS, seed=3)
    a, b = s["benchmarks"]["A"], s["benchmarks"]["B"]
    assert a["avg"]["mean"] == pytest.approx((1 / 4 + 2 / 4 + 0) / 3)
    # pass@2: p1 1 - C(3,2)/C(4,2) = 1/2, p2 1 - C(2,2)/C(4,2) = 5/6, p3 0
    assert a["pass"]["2"]["mean"] == pytest.approx((1 / 2 + 5 / 6 + 0) / 3)
    assert a["pass"]["4"]["mean"] == pytest.approx(2 / 3) and a["pass"]["1"]["mean"] == pytest.approx(a["avg"]["mean"])
    assert sorted(a["pass"]) == ["1", "2", "3", "4"] and sorted(b["pass"]) == ["1"]
    assert a["no_answer"] == pytest.approx(1 / 12) and a["truncated"] == pytest.approx(1 / 12)
    assert a["length"] == {"mean": pytest.approx(140 / 12), "median": 10.0, "p90": pytest.approx(10.0), "max": 30}
    assert b["avg"]["mean"] == 0.5 and b["no_answer"] == 0.5 and b["samples_per_problem"] == 1
    # categories are macro means of their benchmarks, overall the mean of the categories
    assert s["categories"]["math"]["avg"]["mean"] == pytest.approx(a["avg"]["mean"])
    assert s["overall"]["avg"]["mean"] == pytest.approx((a["avg"]["mean"] + 0.5) / 2)
    assert s["overall"]["pass"].keys() == {"1"} and s["categories"]["math"]["pass"].keys() == {"1", "2", "3", "4"}
    for entry in (a["avg"], a["pass"]["2"], b["avg"], s["overall"]["avg"]):
        assert entry["lo"] <= entry["mean"] <= entry["hi"]
    assert summarise(HAND, HAND_BENCHMARKS, seed=3) == s  # seeded


def test_bootstrap_interval_of_constant_scores_is_a_point_and_resamples_are_stratified():
    out = bootstrap({"x": [1.0] * 5, "y": [0.0, 1.0] * 20}, {"x": "math", "y": "math"}, n_boot=500, seed=0)
    assert out["benchmarks"]["x"] == {"mean": 1.0, "lo": 1.0, "hi": 1.0}
    y = out["benchmarks"]["y"]
    assert y["lo"] < 0.5 < y["hi"] and y["hi"] - y["lo"] < 0.4
    # the category mean resamples y only: half of y's interval width
    assert out["categories"]["math"]["hi"] - out["categories"]["math"]["lo"] == pytest.approx((y["hi"] - y["lo"]) / 2)


def test_bootstrap_draws_a_repeated_question_as_one_cluster():
    # 100 problems posing two questions, 50 times each: one always solved, one never. As 100
    # independent problems the interval is about +-0.1; as two questions a resample holds both,
    # or one of them twice, so the mean is 0, 0.5 or 1.
    scores = {"x": [1.0, 0.0] * 50}
    questions = {"x": ["easy", "hard"] * 50}
    naive = bootstrap(scores, {"x": "math"}, n_boot=500, seed=0)["benchmarks"]["x"]
    clustered = bootstrap(scores, {"x": "math"}, n_boot=500, seed=0, clusters=questions)["benchmarks"]["x"]
    assert naive["mean"] == clustered["mean"] == 0.5
    assert naive["hi"] - naive["lo"] < 0.3 and (clustered["lo"], clustered["hi"]) == (0.0, 1.0)
    # distinct labels draw exactly as no labels
    distinct = {"x": [f"q{k}" for k in range(100)]}
    assert bootstrap(scores, {"x": "math"}, n_boot=500, seed=0, clusters=distinct)["benchmarks"]["x"] == naive
    with pytest.raises(ValueError, match="3 cluster labels for 100"):
        bootstrap(scores, {"x": "math"}, clusters={"x": ["a", "b", "c"]})


def test_summary_and_compare_draw_repeated_questions_together(tmp_path):
    """A benchmark whose problems repeat a question (a built-in test split can) counts its
    distinct questions, and its intervals, own and paired, widen to what the questions support."""
    repeated = copy.deepcopy(HAND)
    for record in repeated[:3]:
        record["problem"] = "the one question of A"
    s, plain = summarise(repeated, HAND_BENCHMARKS, seed=3), summarise(HAND, HAND_BENCHMARKS, seed=3)
    a, a_plain = s["benchmarks"]["A"], plain["benchmarks"]["A"]
    assert (a["problems"], a["questions"], a_plain["questions"]) == (3, 1, 3)
    assert a["avg"]["mean"] == a_plain["avg"]["mean"] and a["avg"]["lo"] == a["avg"]["hi"]  # one cluster: a point
    assert a_plain["avg"]["hi"] > a_plain["avg"]["lo"] and s["benchmarks"]["B"] == plain["benchmarks"]["B"]
    better = _better()
    for record in better[:3]:
        record["problem"] = "the one question of A"
    x = _write(tmp_path / "x.json", _results("base", repeated))
    y = _write(tmp_path / "y.json", _results("trained", better))
    diff = compare([x, y], seed=1)["table"]["benchmarks"]["A"]["differences"][0]
    assert diff == {"mean": pytest.approx(1 / 12), "lo": pytest.approx(1 / 12), "hi": pytest.approx(1 / 12)}
    assert "| A | math | 3 (1 distinct) |" in result_markdown(_results("base", repeated))


def test_problem_score_metrics():
    assert problem_score([1, 0, 0, 1], "avg") == 0.5
    assert problem_score([1, 0, 0, 1], "pass@2") == pytest.approx(1 - 1 / 6)
    with pytest.raises(ValueError):
        problem_score([1], "pass@2")


# ---- hand-made results files and compare ------------------------------------------------------

def _results(model, records, **changes):
    settings = {"model": model, "revision": model + "-rev", "system_prompt": "p", "suites": ["hand"],
                "benchmarks": [{**b, "specs": [], "k": b["samples"], "problems": None, "n_problems": 3,
                                "problems_sha256": "same"} for b in HAND_BENCHMARKS],
                "limit": None, "max_new_tokens": 64, "top_p": 1.0, "batch_size": 8, "seed": 0, **changes}
    return {"format": FORMAT, "settings": settings, "model": {"name": model, "revision": model + "-rev", "run": None},
            "summary": summarise(records, HAND_BENCHMARKS), "problems": records}


def _write(path, data):
    path.write_text(json.dumps(data))
    return str(path)


def _better():
    """HAND with p3 solved once more and q2 right: A +1/12, B +1/2."""
    records = copy.deepcopy(HAND)
    records[2]["samples"][0] = _sample(1)
    records[4]["samples"][0] = _sample(1)
    return records


def test_compare_gives_paired_differences_on_hand_made_results(tmp_path):
    a = _write(tmp_path / "a.json", _results("base", HAND))
    b = _write(tmp_path / "b.json", _results("trained", _better()))
    out = compare([a, b], seed=1)
    row = out["table"]["benchmarks"]["A"]
    assert row["values"][0]["mean"] == pytest.approx(0.25) and row["values"][1]["mean"] == pytest.approx(0.25 + 1 / 12)
    assert row["differences"][0]["mean"] == pytest.approx(1 / 12)
    assert out["table"]["benchmarks"]["B"]["differences"][0]["mean"] == pytest.approx(0.5)
    assert out["table"]["overall"]["ALL"]["differences"][0]["mean"] == pytest.approx((1 / 12 + 0.5) / 2)
    diff = row["differences"][0]
    assert 0 <= diff["lo"] <= diff["mean"] <= diff["hi"]  # only one problem changed, upwards
    passed = compare([a, b], metric="pass@4")["table"]["benchmarks"]
    assert passed["A"]["values"][0]["mean"] == pytest.approx(2 / 3) and passed["A"]["differences"][0]["mean"] == \
        pytest.approx(1 / 3)
    assert passed["B"]["values"] == [None, None]  # greedy: no pass@4
    assert [r["label"] for r in out["runs"]] == ["base", "trained"]


def test_compare_refuses_other_settings_unless_forced(tmp_path, capsys):
    a = _write(tmp_path / "a.json", _results("base", HAND))
    b = _write(tmp_path / "b.json", _results("trained", _better(), max_new_tokens=128, seed=1))
    with pytest.raises(InputError) as err:
        compare([a, b])
    assert err.value.field == "max_new_tokens" and "seed" in str(err.value) and "--force" in str(err.value)
    assert main(["eval", "compare", a, b]) == 2
    assert "max_new_tokens" in capsys.readouterr().err
    md = tmp_path / "cmp.md"
    assert main(["eval", "compare", a, b, "--force", "--out", str(md)]) == 0
    printed = capsys.readouterr().out
    assert "Settings differ" in printed and "max_new_tokens" in printed and "+50.0" in printed
    assert md.read_text() in printed + "\n" and json.loads(md.with_suffix(".json").read_text())["differences"]
    assert main(["eval", "compare", a]) == 2 and "at least two" in capsys.readouterr().err
    assert main(["eval", "compare", a, b, "--force", "--metric", "best"]) == 2
    (tmp_path / "x.json").write_text('{"format": "other"}')
    assert main(["eval", "compare", a, str(tmp_path / "x.json")]) == 2
    assert "not a hista eval results file" in capsys.readouterr().err


# ---- evaluation on the tiny model --------------------------------------------------------------

SMALL = dict(model="tiny", suites=["builtin"], limit=5, max_new_tokens=6, batch_size=4)


def test_greedy_is_one_sample_per_problem_whatever_k(tmp_path, capsys):
    out = tmp_path / "greedy.json"
    code = main(["eval", "--model", "tiny", "--suite", "builtin:arith?steps=1", "--k", "4", "--temperature", "0",
                 "--limit", "3", "--max-new-tokens", "4", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0 and "note: temperature 0 is greedy" in printed and str(out) in printed
    data = json.loads(out.read_text())
    assert [len(p["samples"]) for p in data["problems"]] == [1, 1, 1]
    b = data["summary"]["benchmarks"]["builtin:arith?steps=1"]
    assert b["samples_per_problem"] == 1 and list(b["pass"]) == ["1"] and b["category"] == "math"
    assert data["notes"] and data["settings"]["benchmarks"][0]["samples"] == 1


def _problems(path):
    return json.loads(path.read_text())["problems"]


def test_an_interrupted_evaluation_resumes_losing_and_duplicating_nothing(tiny, tmp_path, monkeypatch):
    config = EvalConfig(**SMALL, temperature=1.0, k=2)  # 5 problems of each of 2 benchmarks
    whole = tmp_path / "whole.json"
    evaluate(config, whole, lm=tiny, progress=False)

    cut = tmp_path / "cut.json"
    calls, append = [], store.append

    def crash_after_three(path, records):
        calls.append(path)
        if len(calls) > 4:  # the header, then three problems, each appended as its samples are done
            raise KeyboardInterrupt
        append(path, records)

    monkeypatch.setattr(store, "append", crash_after_three)
    with pytest.raises(KeyboardInterrupt):
        evaluate(config, cut, lm=tiny, progress=False)
    monkeypatch.setattr(store, "append", append)
    samples = store.samples_path(cut)
    raw = samples.read_bytes()
    assert raw.count(b"\n") == 1 + 3 and not cut.exists()
    samples.write_bytes(raw[:-25])  # and a crash in the middle of the last line's write
    result = evaluate(config, cut, lm=tiny, progress=False)
    assert result["found"] == 2 and result["evaluated"] == 8
    assert _problems(cut) == _problems(whole)
    lines = samples.read_text().splitlines()
    keys = [json.loads(line)["key"] for line in lines[1:]]
    assert len(keys) == len(set(keys)) == 10
    # what an uninterrupted run writes: the same lines (in the order problems finished)
    assert sorted(lines) == sorted(store.samples_path(whole).read_text().splitlines())
    again = evaluate(config, cut, lm=tiny, progress=False)
    assert again["evaluated"] == 0 and again["found"] == 10 and _problems(cut) == _problems(whole)


def test_other_settings_into_the_same_out_are_refused_and_change_nothing(tiny, tmp_path, capsys):
    out = tmp_path / "r.json"
    evaluate(EvalConfig(**SMALL), out, lm=tiny, progress=False)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(InputError) as err:
        evaluate(EvalConfig(**{**SMALL, "max_new_tokens": 7}), out, lm=tiny, progress=False)
    assert err.value.field == "max_new_tokens" and "another --out" in str(err.value)
    code = main(["eval", "--model", "tiny", "--suite", "builtin", "--limit", "5", "--max-new-tokens", "6",
                 "--batch-size", "4", "--temperature", "0.5", "--k", "2", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "benchmarks[0].temperature" in err and str(out) in err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    foreign = tmp_path / "notes.json"
    foreign.write_text('{"mine": 1}\n')
    assert main(["eval", "--model", "tiny", "--suite", "builtin", "--limit", "1", "--out", str(foreign)]) == 2
    assert "not a hista eval results file" in capsys.readouterr().err and foreign.read_text() == '{"mine": 1}\n'


def test_results_record_the_engine_and_a_resume_with_another_is_refused(tiny, tmp_path):
    out = tmp_path / "r.json"
    evaluate(EvalConfig(**SMALL), out, lm=tiny, progress=False)
    engine = json.loads(out.read_text())["settings"]["engine"]
    assert engine["name"] == "hf" and set(engine) == {"name", "transformers", "torch"}
    assert json.loads(out.read_text())["code"] == provenance.code()  # the commit that evaluated
    samples = store.samples_path(out)
    lines = samples.read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    header["settings"]["engine"] = {**engine, "transformers": "4.0.0"}
    samples.write_text(json.dumps(header) + "\n" + "".join(lines[1:]))
    before = samples.read_bytes()
    with pytest.raises(InputError) as err:
        evaluate(EvalConfig(**SMALL), out, lm=tiny, progress=False)
    assert "engine" in str(err.value) and samples.read_bytes() == before


def test_the_engine_options_of_hista_eval_are_checked(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["eval", "--model", "tiny", "--suite", "builtin", "--tensor-parallel-size", "2",
                 "--out", str(out)]) == 2
    assert "tensor_parallel_size" in capsys.readouterr().err and not out.exists()


def _train_run(tiny, folder, system_prompt):
    """What hista train leaves: recipe.yaml and checkpoint folders written by save_pretrained."""
    folder.mkdir()
    (folder / "recipe.yaml").write_text(yaml.safe_dump({"model": "tiny", "tasks": "builtin:arith?steps=1",
                                                        "system_prompt": system_prompt,
                                                        "advantage_estimator": {"name": "hista"},
                                                        "loss": {"name": "dapo"}}))
    checkpoint = folder / "checkpoint-2"
    tiny.model.save_pretrained(checkpoint)
    tiny.tokenizer.save_pretrained(checkpoint)
    return checkpoint


def test_a_hista_train_checkpoint_loads_with_the_runs_system_prompt(tiny, tmp_path):
    from hista.evaluation.suites import PRESETS, load_problems
    from hista.rollout import SYSTEM_PROMPT, GenerateEngine, SamplingConfig
    from hista.sharding import derive_seed

    prompt = "Reply in one short line and put the answer in \\boxed{}."
    checkpoint = _train_run(tiny, tmp_path / "run", prompt)
    spec = "builtin:arith?steps=1"
    config = dict(suites=[spec], limit=3, max_new_tokens=6, batch_size=8, temperature=1.0, k=2)  # one chunk
    for model in (str(checkpoint), str(tmp_path / "run")):
        out = tmp_path / f"{len(model)}.json"
        evaluate(EvalConfig(model=model, **config), out, progress=False)
        data = json.loads(out.read_text())
        assert data["settings"]["system_prompt"] == prompt and data["settings"]["model"] == str(checkpoint)
        assert data["model"]["run"]["checkpoint"] == "checkpoint-2" and data["model"]["run"]["step"] == 2
        assert data["model"]["run"]["advantage_estimator"] == "hista"
    # the checkpoint answers as the tiny model does when posed the run's system prompt
    problems = load_problems(PRESETS["builtin"].benchmarks[0], 3)
    seeds = [derive_seed(0, spec, p["id"]) for p in problems]  # a problem's samples: seeded by its id

    def texts(system_prompt):
        sampling = SamplingConfig(temperature=1.0, max_new_tokens=6, batch_size=8, system_prompt=system_prompt)
        groups = GenerateEngine(tiny, sampling).generate([p["problem"] for p in problems], 2, prompt_seeds=seeds)
        return [[r.completion_text for r in g] for g in groups]

    assert [[s["text"] for s in p["samples"]] for p in data["problems"]] == texts(prompt) != texts(SYSTEM_PROMPT)
    # the checkpoint saved again at the same path is another model: no resuming into its results
    tiny.model.save_pretrained(checkpoint)
    with pytest.raises(InputError) as err:
        evaluate(EvalConfig(model=str(checkpoint), **config), out, progress=False)
    assert err.value.field == "weights"


@pytest.mark.parametrize("argv, needle", [
    (["--suite", "nosuch"], "unknown suite 'nosuch'"),
    (["--suite", "builtin:nosuch"], "unknown built-in task"),
    (["--suite", "builtin,builtin"], "named twice"),
    (["--suite", "paper-hybrid"], "cannot load these benchmarks yet"),
    (["--suite", "builtin", "--k", "0"], "--k"),
    (["--suite", "builtin", "--temperature", "-1"], "--temperature"),
    (["--limit", "2"], "--suite"),
])
def test_bad_input_exits_2_with_a_clear_message_and_writes_nothing(tmp_path, capsys, argv, needle):
    out = tmp_path / "r.json"
    try:
        code = main(["eval", "--model", "tiny", "--out", str(out), *argv])
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    assert code == 2 and needle in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_an_unreadable_checkpoint_exits_2_naming_it(tiny, tmp_path, capsys):
    checkpoint = _train_run(tiny, tmp_path / "run", "p")
    (checkpoint / "config.json").write_text("{ not json")
    out = tmp_path / "r.json"
    assert main(["eval", "--model", str(checkpoint), "--suite", "builtin", "--limit", "1", "--out", str(out)]) == 2
    assert str(checkpoint) in capsys.readouterr().err
    (tmp_path / "run" / "recipe.yaml").write_text("model: [unclosed\n")
    assert main(["eval", "--model", str(checkpoint), "--suite", "builtin", "--limit", "1", "--out", str(out)]) == 2
    assert "recipe.yaml" in capsys.readouterr().err
    assert not out.exists() and not store.samples_path(out).exists()


def test_a_preset_that_needs_the_hub_fails_fast_offline(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "r.json"
    assert main(["eval", "--model", "tiny", "--suite", "paper-math", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "could not reach the Hugging Face Hub" in err and "hf:math500" in err
    assert list(tmp_path.iterdir()) == []


def test_presets_mirror_the_paper_and_options_override_them():
    from hista.evaluation.suites import resolve

    benchmarks, cap, notes = resolve(["paper-math"])
    by_name = {b.name: b for b in benchmarks}
    assert list(by_name) == ["MATH-500", "GSM8K", "Minerva", "OlympiadBench", "AMC23", "AIME24&25", "GaoKao2023en",
                             "CollegeMath"]
    assert {(b.temperature, b.samples) for n, b in by_name.items() if n not in ("AMC23", "AIME24&25")} == {(0.0, 1)}
    assert (by_name["AIME24&25"].temperature, by_name["AIME24&25"].samples) == (0.1, 16)
    assert len(by_name["AIME24&25"].specs) == 2 and cap == 4096 and notes == []
    greedy, _, notes = resolve(["paper-math"], temperature=0.0, k=4)
    assert all(b.samples == 1 for b in greedy) and "greedy" in notes[0] and "k=4" in notes[0]
    mixed, cap, _ = resolve(["builtin", "builtin:arith?steps=3"], temperature=0.7, k=8)
    assert [(b.name, b.category, b.samples) for b in mixed] == [("arith", "math", 8), ("choice", "general", 8),
                                                                  ("builtin:arith?steps=3", None, 8)]
    assert cap == 256


def test_olympiadbench_rows_map_to_math_records():
    from hista.tasks.hf import BY_NAME, olympiad_record

    row = {"question": "Find x and y.", "final_answer": ["3", " 4 "], "subfield": "Algebra", "id": 7}
    assert olympiad_record(row) == ("Find x and y.", "3, 4", "Algebra", {"id": 7, "subfield": "Algebra"})
    assert olympiad_record({"question": "Q", "final_answer": []}) is None
    assert BY_NAME["math-ai/olympiadbench"].mapper is olympiad_record


def test_sharded_evaluation_merges_into_the_whole_one(tiny, tmp_path, capsys):
    """Three shards of 6 chunks (two benchmarks), merged, give the whole evaluation's problems,
    summary, table and per-problem file; merge refuses a missing or repeated shard, parts of
    another evaluation, a shard resumed as another, and a problem in two parts."""
    from hista.evaluation.merge import merge

    config = EvalConfig(**SMALL, temperature=1.0, k=2)
    whole = tmp_path / "whole.json"
    evaluate(config, whole, lm=tiny, progress=False)
    parts = [tmp_path / f"part{k}.json" for k in (1, 2, 3)]
    for k, part in enumerate(parts, start=1):
        evaluate(config, part, lm=tiny, progress=False, shard=(k, 3))
    assert [len(_problems(p)) for p in parts] == [4, 4, 2]  # chunks 0,3 / 1,4 / 2,5 of 2,2,1 + 2,2,1 problems
    merged = tmp_path / "merged.json"
    table = merge([parts[2], parts[0], parts[1]], merged)
    data, reference = json.loads(merged.read_text()), json.loads(whole.read_text())
    assert data["problems"] == reference["problems"] and data["summary"] == reference["summary"]
    assert data["settings"] == reference["settings"] and "shard" not in data
    assert store.samples_path(merged).read_bytes() == store.samples_path(whole).read_bytes()
    assert table == (tmp_path / "whole.md").read_text()

    def refused(paths, match):
        with pytest.raises(InputError, match=match):
            merge(paths, tmp_path / "bad.json")
        assert not (tmp_path / "bad.json").exists()

    refused(parts[:2], "shard 3/3 missing")
    refused([parts[0], parts[1], parts[1], parts[2]], "is shard 2/3 again")
    refused([whole, *parts], "not the results of a shard")
    other = tmp_path / "other3.json"
    evaluate(EvalConfig(**SMALL, temperature=1.0, k=2, seed=1), other, lm=tiny, progress=False, shard=(3, 3))
    refused([parts[0], parts[1], other], "another evaluation.*seed")
    stray = json.loads(parts[1].read_text())
    stray["problems"].append(_problems(parts[2])[0])
    (tmp_path / "stray.json").write_text(json.dumps(stray))
    refused([parts[0], tmp_path / "stray.json", parts[2]], "again")
    with pytest.raises(InputError, match="shard 1/3, not shard 2/3"):
        evaluate(config, parts[0], lm=tiny, progress=False, shard=(2, 3))
    assert main(["eval", "merge", *map(str, parts), "--out", str(tmp_path / "cli.json")]) == 0
    assert _problems(tmp_path / "cli.json") == reference["problems"]
    assert main(["eval", "--model", "tiny", "--suite", "builtin", "--shard=4/3", "--out", str(other)]) == 2
    assert "--shard" in capsys.readouterr().err


# ---- issue 29: empty shards, part contents, the per-problem file identified before repair ------

DATA = __import__("pathlib").Path(__file__).parents[1] / "data"


def test_an_empty_shard_writes_an_empty_part_that_merges_into_the_whole_evaluation(tiny, tmp_path, capsys):
    """One chunk, two shards: shard 2/2 has nothing to evaluate. It writes an empty part
    (results, table, per-problem header) instead of crashing after the model loads, and the
    parts merge into the whole evaluation's results, table and per-problem file (SPEC §10)."""
    from hista.evaluation.merge import merge

    options = dict(model="tiny", suites=["builtin:arith?steps=1"], limit=2, max_new_tokens=4, batch_size=2)
    whole = tmp_path / "whole.json"
    evaluate(EvalConfig(**options), whole, lm=tiny, progress=False)
    first, empty = tmp_path / "p1.json", tmp_path / "p2.json"
    evaluate(EvalConfig(**options), first, lm=tiny, progress=False, shard=(1, 2))
    argv = ["eval", "--model", "tiny", "--suite", "builtin:arith?steps=1", "--limit", "2", "--max-new-tokens", "4",
            "--batch-size", "2", "--shard", "2/2", "--out", str(empty)]
    assert main(argv) == 0, capsys.readouterr().err
    data = json.loads(empty.read_text())
    assert data["problems"] == [] and data["shard"]["part"] == [2, 2] and len(data["shard"]["keys"]) == 2
    assert data["summary"]["benchmarks"] == {} and "n/a" in (tmp_path / "p2.md").read_text()
    assert [json.loads(line)["kind"] for line in store.samples_path(empty).read_text().splitlines()] == ["settings"]
    assert main(argv) == 0  # resumed: nothing to do, the same empty part
    assert json.loads(empty.read_text())["problems"] == []
    merged = tmp_path / "merged.json"
    table = merge([empty, first], merged)
    got, reference = json.loads(merged.read_text()), json.loads(whole.read_text())
    assert got["problems"] == reference["problems"] and got["summary"] == reference["summary"]
    assert got["settings"] == reference["settings"] and "shard" not in got
    assert store.samples_path(merged).read_bytes() == store.samples_path(whole).read_bytes()
    assert table == (tmp_path / "whole.md").read_text()


def _part(tmp_path, name, change=None):
    data = json.loads((DATA / f"eval_{name}.json").read_text())
    if change:
        change(data)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def test_merge_refuses_a_part_with_reward_7_and_writes_nothing(tmp_path, capsys):
    """A reward outside [0, 1] used to merge silently (avg@1 1.75): merge checks every record
    with the check compare uses (store.check_problem) before it writes anything (SPEC §10)."""
    from hista.evaluation.merge import merge

    def seven(data):
        data["problems"][1]["samples"][0]["reward"] = 7

    parts = [_part(tmp_path, "part1", seven), _part(tmp_path, "part2")]
    out = tmp_path / "merged.json"
    with pytest.raises(InputError) as err:
        merge(parts, out)
    assert err.value.path == str(parts[0]) and err.value.field == "problems[1].samples[0].reward"
    assert main(["eval", "merge", *map(str, parts), "--out", str(out)]) == 2
    assert "problems[1].samples[0].reward" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part1.json", "part2.json"]
    with pytest.raises(InputError, match="reward"):  # compare refuses it with the same check
        compare([str(parts[0]), str(parts[0])])
    # the committed parts themselves merge, and compare with the whole run they come from
    good = [_part(tmp_path, "part1"), _part(tmp_path, "part2")]
    merge(good, out)
    whole = DATA / "eval_results.json"
    assert json.loads(out.read_text())["problems"] == json.loads(whole.read_text())["problems"]
    assert compare([str(out), str(whole)])["table"]["overall"]["ALL"]["differences"][0]["mean"] == 0


def test_the_per_problem_file_is_identified_before_a_cut_line_is_dropped(tmp_path):
    """store.read never changes the file: an unterminated line that cannot be the start of a
    settings header is refused, a crash's cut line after a header is left out, and only
    cut_unterminated, once every check has passed, cuts it off (SPEC §10)."""
    path = tmp_path / "v.samples.jsonl"
    for foreign in (b'{"mine": 1}', b"my notes", b'{"mine": 1}\n{"mine": 2', b'{"kind": "settings"}\nnotes'):
        path.write_bytes(foreign)
        with pytest.raises(InputError) as err:
            store.read(path)
        assert err.value.path == str(path) and path.read_bytes() == foreign
    path.write_bytes(b'{"hista_version":"0.1')  # a header cut by a crash
    assert store.read(path) == (None, []) and path.read_bytes() == b'{"hista_version":"0.1'
    cut_unterminated(path)
    assert path.read_bytes() == b""
    header = b'{"hista_version":"0.1.0","kind":"settings","settings":{"seed":0}}\n'
    path.write_bytes(header + b'{"answer":"8","bench')
    got, records = store.read(path)
    assert got["settings"] == {"seed": 0} and records == [] and path.read_bytes().endswith(b'"bench')
    cut_unterminated(path)
    assert path.read_bytes() == header
    cut_unterminated(tmp_path / "missing.samples.jsonl")  # nothing to cut
