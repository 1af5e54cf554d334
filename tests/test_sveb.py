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
from hista.sveb import cases as case_file

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
    partial = case_file.read(out, repair=True)
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
    data = json.loads(results.read_text())
    assert len(data["cases"]) == 4 and set(data["methods"]) == {"grpo", "numca", "numca-reference", "hista", "hista-reference"}
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
    bad.write_text("".join(damage([line.rstrip("\n") + "\n" for line in lines])).rstrip("\n") + ("\n" if needle != ":4" else ""))
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
