"""SVEB build / eval on the tiny model (SPEC §8): resumable after SIGKILL, deterministic,
strict about its input."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from hista.cli import main
from hista.jsonio import jsonable
from hista.rollout.engines import available_engines
from hista.sveb import cases as case_file

pytestmark = pytest.mark.xdist_group("sveb-build-and-eval")  # its module fixtures are built once (tests/conftest.py)

BUILD = ["sveb", "build", "--model", "tiny", "--tasks", "builtin:arith", "--tasks", "builtin:choice",
         "--rollouts", "4", "--continuations", "3", "--max-new-tokens", "6", "--no-filter", "--seed", "5"]


def _build(out, problems=3):
    assert main(BUILD + ["--problems", str(problems), "--out", str(out)]) == 0


def test_same_seed_gives_identical_file(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _build(a)
    _build(b)
    assert a.read_bytes() == b.read_bytes()
    records = case_file.read(a)
    assert len(records) == 6 and {r["field"] for r in records} == {"number", "choice"}
    for r in records:
        assert r["kind"] == "case" and len(r["rollouts"]) == 4 and len(r["continuations"]) == 3
        assert r["target"] == sum(r["continuations"]) / 3
        t, i = r["state"]["t"], r["state"]["rollout"]
        assert 1 <= t < len(r["rollouts"][i]["completion_ids"])
    # a rerun appends nothing; more problems extend the file without touching what is there
    before = a.read_bytes()
    _build(a)
    assert a.read_bytes() == before
    _build(a, problems=4)
    assert a.read_bytes().startswith(before) and len(case_file.read(a)) == 8


def test_sigkill_mid_build_then_resume(tmp_path):
    out = tmp_path / "cases.jsonl"
    argv = [sys.executable, "-m", "hista.cli"] + BUILD + ["--problems", "12", "--out", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if out.exists() and out.read_bytes().count(b"\n") >= 3:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the build finished before it could be killed; give it more problems"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = case_file.read(out, partial=True)
    assert 3 <= len(partial) < 24
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records = case_file.read(out)
    keys = [r["key"] for r in records]
    assert len(keys) == len(set(keys)) == 24
    reference = tmp_path / "reference.jsonl"
    subprocess.run([*argv[:-1], str(reference)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # every case is exactly the one an uninterrupted build writes
    assert sorted(out.read_text().splitlines()) == sorted(reference.read_text().splitlines())


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("sveb") / "cases.jsonl"
    _build(out, problems=2)
    return out


def _eval(cases, out, *extra):
    return main(["sveb", "eval", "--cases", str(cases), "--out", str(out), *extra])


def test_eval_and_report(built, tmp_path, capsys):
    results = tmp_path / "results.json"
    assert _eval(built, results) == 0
    assert f"sveb eval: 4 cases of 4 problems -> {results}" in capsys.readouterr().out
    data = json.loads(results.read_text())
    assert len(data["cases"]) == 4
    assert set(data["methods"]) == {"grpo", "numca", "numca-reference", "hista", "hista-paper", "hista-reference",
                                    "probe"}
    assert data["fits"]["probe"]["folds"] == 4 and data["layers"] == {"hista": -1, "hista-paper": -1,
                                                                      "hista-reference": -1, "probe": -2}
    for row in data["cases"]:
        assert set(row["values"]) == set(data["methods"]) and 0 <= row["values"]["grpo"] <= 1
    assert main(["sveb", "report", "--results", str(results), "--out", str(tmp_path / "report")]) == 0
    table = capsys.readouterr().out
    assert "Hista-reference" in table and "MCS@3" in table
    assert (tmp_path / "report" / "report.md").exists()


@pytest.mark.parametrize("damage, needle", [
    (lambda lines: lines[:1] + ['{"kind": "case", "key": '] + lines[2:], ":2"),
    (lambda lines: lines[:-1] + [lines[-1][:-1][:40]], ":4"),
    (lambda lines: lines[:2] + [lines[2].replace('"continuations":[', '"continuations":"x",[')] + lines[3:], ":3"),
    (lambda lines: [lines[0].replace('"state":', '"stat":')] + lines[1:], "state"),
])
def test_eval_rejects_damaged_files(built, tmp_path, capsys, damage, needle):
    lines = built.read_text().splitlines(keepends=True)
    bad = tmp_path / "bad.jsonl"
    damaged = "".join(damage([line.rstrip("\n") + "\n" for line in lines])).rstrip("\n")
    bad.write_text(damaged + ("\n" if needle != ":4" else ""))
    out = tmp_path / "results.json"
    assert _eval(bad, out) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and needle in err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]


def test_eval_refuses_another_model(built, tmp_path, capsys):
    out = tmp_path / "results.json"
    assert _eval(built, out, "--eval-model", "smollm2-135m-instruct") == 2
    assert "built with model 'tiny'" in capsys.readouterr().err and not out.exists()
    other = tmp_path / "other.jsonl"
    other.write_text(built.read_text().replace('"revision":"tiny-seed0-h64-l2"', '"revision":"tiny-seed1-h64-l2"'))
    assert _eval(other, out) == 2
    assert "revision" in capsys.readouterr().err and not out.exists()


def test_build_refuses_other_settings(built, capsys):
    assert main(BUILD[:-2] + ["--seed", "6", "--problems", "2", "--out", str(built)]) == 2
    assert "seed" in capsys.readouterr().err


def _with_engine(record: dict, engine) -> str:
    settings = dict(record["settings"], engine=engine)
    if engine is None:
        settings.pop("engine")
    return case_file.dumps({**record, "settings": settings})


def test_cases_record_their_engine_and_no_file_mixes_engines(built, tmp_path, capsys):
    import torch
    import transformers

    records = case_file.read(built)
    hf = {"name": "hf", "transformers": transformers.__version__, "torch": torch.__version__}
    assert all(r["settings"]["engine"] == hf for r in records)
    other = {"name": "vllm", "vllm": "0.33.0", "torch": "2.14.0", "tensor_parallel_size": 1}
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("".join(_with_engine(r, other if k == 3 else r["settings"]["engine"])
                             for k, r in enumerate(records)))
    out = tmp_path / "results.json"
    assert _eval(mixed, out) == 2
    err = capsys.readouterr().err
    assert str(mixed) in err and "settings.engine" in err and "several engines" in err and not out.exists()
    # an older file (no engine recorded) evaluates, but a build does not resume it with today's engine
    older = tmp_path / "older.jsonl"
    older.write_text("".join(_with_engine(r, None) for r in records))
    assert _eval(older, out) == 0
    before = older.read_bytes()
    assert main(BUILD + ["--problems", "3", "--out", str(older)]) == 2
    assert "engine" in capsys.readouterr().err and older.read_bytes() == before


def test_engine_options_are_checked_before_anything_loads(tmp_path, capsys):
    out = tmp_path / "cases.jsonl"
    assert main(BUILD + ["--problems", "1", "--tensor-parallel-size", "2", "--out", str(out)]) == 2
    assert "tensor_parallel_size" in capsys.readouterr().err
    if "vllm" in available_engines():
        return
    assert main(BUILD + ["--problems", "1", "--engine", "vllm", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert ("pip install 'hista[vllm]'" in err or "CUDA GPU" in err) and not out.exists()


def test_each_sveb_action_has_its_own_options(capsys):
    from hista.cli import build_parser

    helps = {}
    for action in ("build", "eval", "report", "run"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["sveb", action, "--help"])
        helps[action] = capsys.readouterr().out
    assert "--rollouts" in helps["build"] and "--methods" not in helps["build"] and "--cases" not in helps["build"]
    assert "--methods" in helps["eval"] and "--rollouts" not in helps["eval"] and "--preset" not in helps["eval"]
    assert "--results" in helps["report"] and "--methods" not in helps["report"]
    assert "--rollouts" in helps["run"] and "--methods" in helps["run"] and "(default: quick)" in helps["run"]


def test_presets_are_build_configs_and_build_defaults_are_the_default_preset():
    from hista.sveb.presets import PRESETS, BuildConfig

    assert PRESETS["default"] == BuildConfig() and BuildConfig().rollouts == 32 and BuildConfig().continuations == 20
    assert PRESETS["quick"].tasks == ("builtin:arith?steps=1", "builtin:choice") and PRESETS["quick"].problems == 12
    from hista import tasks

    for name, config in PRESETS.items():  # every preset's task sources load
        assert all(tasks.load(spec, n=2, seed=0) for spec in config.tasks), name
    assert all("explain=yes" in spec for spec in PRESETS["long"].tasks) and PRESETS["long"].max_new_tokens >= 200


def test_mc_reads_the_stored_continuations(built, tmp_path):
    """mc with all M continuations is the target itself; averaged over every subset of n of
    them, mc?num=n has exactly the MCS@n error of the report."""
    import itertools

    from hista.estimators import get
    from hista.sveb.metrics import mcs_error
    from hista.types import RolloutGroup, State

    results = tmp_path / "results.json"
    assert _eval(built, results, "--methods", "grpo,mc,mc?num=1") == 0
    data = json.loads(results.read_text())
    assert data["summary"]["rows"]["mc"]["all"]["mae"] == 0.0
    for row in data["cases"]:
        assert row["values"]["mc"] == pytest.approx(row["target"])
        assert row["values"]["mc?num=1"] == row["continuations"][0]
        conts = row["continuations"]
        for n in range(1, len(conts) + 1):
            mc = get("mc", num=n)
            errors = [abs(float(mc.state_values(RolloutGroup([]), [State(continuations=list(s))])[0]) - row["target"])
                      for s in itertools.combinations(conts, n)]
            assert sum(errors) / len(errors) == pytest.approx(mcs_error(conts, n))


@pytest.mark.parametrize("methods, needle", [
    ("grpo-reference", "estimator 'grpo' has no profile 'reference'; estimators with profiles: hista"),
    ("hista?alpha=2", "method 'hista?alpha=2'"),
    ("hista?layer=7", "layer 7"),
    ("nope", "unknown estimator 'nope'"),
])
def test_bad_methods_exit_2_naming_the_method(built, tmp_path, capsys, methods, needle):
    out = tmp_path / "results.json"
    assert _eval(built, out, "--methods", methods) == 2
    assert needle in capsys.readouterr().err and not out.exists()


def test_a_failing_method_exits_2_naming_it(built, tmp_path, capsys, monkeypatch):
    from hista.estimators.group_mean import GroupMean

    def broken(self, group, states):
        raise RuntimeError("boom")

    monkeypatch.setattr(GroupMean, "state_values", broken)
    out = tmp_path / "results.json"
    assert _eval(built, out, "--methods", "hista,grpo") == 2
    err = capsys.readouterr().err
    assert "method 'grpo' failed on case" in err and "boom" in err and not out.exists()


def test_hista_layer_in_sveb_eval(built, tmp_path, monkeypatch):
    """The hidden layer comes from each method's estimator; every layer in use comes from one
    forward pass per case."""
    from hista.sveb import eval as sveb_eval

    layers = []
    original = sveb_eval.hidden_states

    def spy(*args, **kw):
        layers.append(kw.get("layers"))
        return original(*args, **kw)

    monkeypatch.setattr(sveb_eval, "hidden_states", spy)
    varied = tmp_path / "varied.jsonl"  # the tiny model never answers: give the rollouts mixed rewards
    records = [json.loads(line) for line in built.read_text().splitlines()]
    for record in records:
        for k, rollout in enumerate(record["rollouts"]):
            rollout["reward"] = float(k % 2)
    varied.write_text("".join(case_file.dumps(r) for r in records))
    built = varied
    fine = "min_distance=0.0001"
    methods = [f"hista?{fine}", f"hista?layer=-1&{fine}", f"hista?layer=-2&{fine}"]
    # the paper's protocol (the state's own reward shown): the layers' values differ on these tiny cases
    results = sveb_eval.evaluate(built, methods, progress=False, n_boot=10, protocol="paper")
    assert layers == [[-2, -1]] * len(results["cases"])
    assert results["methods"][methods[2]]["config"]["layer"] == -2
    values = [tuple(r.values[m] for m in methods) for r in results["cases"]]
    assert all(a == b for a, b, _ in values) and any(a != c for a, _, c in values)
    # the default profile's layer is resolved for the model (tiny: 2 layers, depth 23/30 -> -1) and recorded,
    # and so are the interval and stride the structure rule gave each case's group
    assert results["methods"][methods[0]]["config"]["layer"] is None and results["layers"][methods[0]] == -1
    assert results["layers"][methods[2]] == -2
    assert all(r.structure[methods[0]] == {"interval": 12, "stride": 5} for r in results["cases"])
    assert all(r.structure[methods[2]] == {"interval": 12, "stride": 5} for r in results["cases"])


def test_states_of_one_problem_share_a_forward_pass(tmp_path, monkeypatch):
    """Two states per problem: eval runs one forward pass per group of rollouts, with a
    cross-fitted method too, and each case gets the values it gets when evaluated alone."""
    from hista.sveb import eval as sveb_eval

    cases = tmp_path / "cases.jsonl"
    assert main(BUILD + ["--problems", "2", "--states-per-problem", "2", "--out", str(cases)]) == 0
    records = [json.loads(line) for line in cases.read_text().splitlines()]
    for record in records:  # the tiny model never answers: give the rollouts mixed rewards
        for k, rollout in enumerate(record["rollouts"]):
            rollout["reward"] = float(k % 2)
    cases.write_text("".join(case_file.dumps(r) for r in records))
    calls = []
    original = sveb_eval.hidden_states
    monkeypatch.setattr(sveb_eval, "hidden_states", lambda *a, **kw: calls.append(1) or original(*a, **kw))
    methods = ["hista?min_distance=0.0001&interval=2", "grpo"]
    results = sveb_eval.evaluate(cases, methods, progress=False, n_boot=10)
    assert len(results["cases"]) == 8 and len(calls) == 4
    chosen = sveb_eval.build_methods(methods)
    read = case_file.read_cases(cases)
    assert (read.model, read.revision, read.path) == ("tiny", records[0]["settings"]["revision"], cases)
    lm, layers = sveb_eval.open_model(chosen, read)
    setup = sveb_eval.Setup(read, chosen, lm, layers)
    alone = [sveb_eval.evaluate_case(r, setup).values for r in records]
    assert [row.values for row in results["cases"]] == alone

    # issue 66: with a cross-fitted method the fit pass reads every group first, and scoring
    # uses what it read: still one pass per group, kept in memory or, past the budget, on disk
    with_probe = methods + ["probe?layer=1"]
    calls.clear()
    in_memory = sveb_eval.evaluate(cases, with_probe, progress=False, n_boot=10)
    assert len(calls) == 4
    monkeypatch.setattr(sveb_eval, "MEMORY_BUDGET", 0)
    monkeypatch.setattr(sveb_eval.tempfile, "tempdir", str(tmp_path))
    calls.clear()
    on_disk = sveb_eval.evaluate(cases, with_probe, progress=False, n_boot=10)
    assert len(calls) == 4 and jsonable(on_disk) == jsonable(in_memory)  # NaN statistics as null
    assert not list(tmp_path.glob("hista-sveb-states-*"))  # the temporary folder is gone
    setup = sveb_eval.prepare(sveb_eval.build_methods(with_probe), read, progress=False)
    setup.states = None  # without the store every case reads its group anew, as before issue 66
    assert [sveb_eval.evaluate_case(r, setup).values for r in records] == [
        row.values for row in in_memory["cases"]]


def test_sveb_run_library_function(tmp_path):
    from hista.sveb import run

    result = run("quick", tmp_path / "run", methods=["grpo", "hista"], progress=False,
                 overrides={"model": "tiny", "problems": 1, "rollouts": 4, "continuations": 2, "max_new_tokens": 4,
                            "lo": None, "hi": None})
    assert result["counts"]["cases"] == 2 and result["cases"].exists() and result["results"].exists()
    assert set(result["report"]) == {"markdown", "json", "mae_plot", "differences_plot", "delta_plot"}
    assert json.loads(result["results"].read_text())["settings"]["rollouts"] == 4


def test_sveb_run_with_critic(tmp_path):
    from hista.sveb import run

    overrides = {"model": "tiny", "problems": 2, "rollouts": 4, "continuations": 2, "max_new_tokens": 4,
                 "lo": None, "hi": None}
    result = run("quick", tmp_path / "run", methods=["grpo"], progress=False, overrides=overrides, with_critic=True)
    critics = tmp_path / "run" / "critics"
    assert sorted(p.name for p in critics.iterdir()) == ["ppo-1-0.95", "ppo-1-1", "ppo-n-0.95", "ppo-n-1",
                                                         "train.json"]
    assert json.loads((critics / "ppo-1-1" / "folds.json").read_text())["folds"] == 4  # one per problem
    results = json.loads(result["results"].read_text())
    assert list(results["methods"]) == ["grpo", "ppo-1?lam=0.95", "ppo-1?lam=1", "ppo-n?lam=0.95", "ppo-n?lam=1"]
    assert "PPO critics (paper Table 1 layout)" in result["report"]["markdown"].read_text()
