"""SVEB's protocols (issue 63, docs/sveb.md "Protocols"): by default a case's state is scored as a
baseline is used, its own rollout shown without its reward; ``--protocol paper`` shows it with
its reward, as the paper's SVEB did. Each results row records how much
each method's value moves when the state's own reward flips (the leak figure)."""

from __future__ import annotations

import json

import pytest

from hista import estimators
from hista.cli import main
from hista.estimators.leakage import without_reward
from hista.sveb import cases, segments
from hista.sveb.rows import CaseRow, RowState
from hista.types import Rollout, RolloutGroup, State

TEXTS = ["9 - 4 = 5. 5 + 3 = 8.", "9 - 4 = 6. 6 + 3 = 9.", "9 - 4 = 5. 5 + 3 = 8.", "9 - 4 = 5. 5 + 2 = 7."]
REWARDS = [1.0, 0.0, 1.0, 0.0]


def _record(key: str, rollout: int, t: int) -> dict:
    """A case whose completions are one token per character (the ids are the characters' codes)."""
    settings = {"model": "tiny", "revision": "r", "engine": "hf"}
    rollouts = [{"completion_ids": [ord(c) for c in text], "completion_text": text,
                 "offsets": [[k, k + 1] for k in range(len(text))], "reward": reward}
                for text, reward in zip(TEXTS, REWARDS)]
    problem = {"id": key, "problem": "Start with 9. Subtract 4. Then add 3.", "answer": "8", "field": "number",
               "verifier": "math"}
    return {"kind": "case", "key": key, "settings": settings, "problem": problem, "field": "number",
            "prompt_ids": [1, 2, 3], "rollouts": rollouts, "accuracy": 0.5, "state": {"rollout": rollout, "t": t},
            "continuations": [1.0, 0.0, 1.0, 1.0], "target": 0.75}


@pytest.fixture()
def case_file(tmp_path):
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(cases.dumps(_record(f"p{k}#s0", k, t)) for k, t in enumerate([3, 12, 20, 20])))
    return path


def test_without_reward_hides_the_states_own_outcome():
    group = cases.group_of(_record("p", 1, 12))
    hidden = without_reward(group, 1)
    assert hidden.rollouts[1].reward == pytest.approx(2 / 3)  # the mean of the other three rewards, not R_1 = 0
    assert hidden.rollouts[1].completion_ids == group.rollouts[1].completion_ids
    assert [r.reward for r in hidden.rollouts[:1] + hidden.rollouts[2:]] == REWARDS[:1] + REWARDS[2:]
    # whatever R_1 was, an estimator that reads it sees the same group
    flipped = RolloutGroup([group.rollouts[0], Rollout([1, 2, 3], group.rollouts[1].completion_ids, 1.0,
                                                       completion_text=TEXTS[1], offsets=group.rollouts[1].offsets),
                            *group.rollouts[2:]])
    est = estimators.get("numca", leave_one_out=False)
    assert est.state_values(group, [State(1, 12)]) != est.state_values(flipped, [State(1, 12)])
    assert est.state_values(without_reward(flipped, 1), [State(1, 12)]) == est.state_values(hidden, [State(1, 12)])


def _eval(case_file, out, *extra):
    return main(["sveb", "eval", "--cases", str(case_file), "--out", str(out),
                 "--methods", "grpo,numca,numca?leave_one_out=false", *extra])


def test_eval_is_leak_free_by_default_and_reports_the_leak(case_file, tmp_path, capsys):
    assert _eval(case_file, tmp_path / "results.json") == 0
    printed = capsys.readouterr().out
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["protocol"] == "leak-free" and "Protocol: `leak-free`" in printed
    for row in data["cases"]:
        i = row["state"]["rollout"]
        others = (sum(REWARDS) - REWARDS[i]) / 3
        assert row["values"]["grpo"] == pytest.approx(others) and row["group_mean"] == pytest.approx(others)
        assert row["leak"]["grpo"] == pytest.approx(0.25)  # the group mean holds R_i with weight 1/G
        assert row["leak"]["numca"] == 0.0  # the valid default
    assert data["leak"]["numca?leave_one_out=false"] > 0  # its table counts rollout i
    assert main(["sveb", "report", "--results", str(tmp_path / "results.json"), "--out", str(tmp_path / "r")]) == 0
    report = (tmp_path / "r" / "report.md").read_text()
    assert "## Leak" in report and "| GRPO | 0.250 |" in report


def test_the_papers_protocol_is_one_option_away(case_file, tmp_path):
    assert _eval(case_file, tmp_path / "paper.json", "--protocol", "paper") == 0
    assert _eval(case_file, tmp_path / "free.json") == 0
    paper, free = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("paper", "free"))
    assert paper["protocol"] == "paper"
    for old, new in zip(paper["cases"], free["cases"]):
        assert old["values"]["grpo"] == old["group_mean"] == 0.5  # every reward shown: the group mean
        assert old["leak"] == new["leak"]  # the leak figure always shows the whole group
        assert old["values"]["numca"] == new["values"]["numca"]  # a valid baseline scores the same either way
    # a leaking one does not: its table counts the state's own rollout with its reward
    assert any(old["values"]["numca?leave_one_out=false"] != new["values"]["numca?leave_one_out=false"]
               for old, new in zip(paper["cases"], free["cases"]))


# --- segments: the credit between two states of one rollout -----------------------------------


def _row(problem: str, rollout: int, t: int, target: float, values: dict) -> CaseRow:
    return CaseRow(case_id=f"{problem}#s{t}", field="f", target=target, continuations=(target,), values=values,
                   state=RowState(rollout=rollout, t=t))


def test_segments_score_the_credit_between_two_states_of_a_rollout():
    rows = [_row("a", 0, 2, 0.25, {"good": 0.3, "flat": 0.5}), _row("a", 0, 9, 0.875, {"good": 0.8, "flat": 0.5}),
            _row("b", 1, 5, 0.75, {"good": 0.7, "flat": 0.4}), _row("b", 1, 3, 0.75, {"good": 0.6, "flat": 0.4}),
            _row("c", 0, 4, 0.5, {"good": 0.5, "flat": 0.5}), _row("c", 2, 6, 0.0, {"good": 0.0, "flat": 0.5})]
    found = segments.pairs(rows)
    assert [(a.case_id, b.case_id) for a, b in found] == [("a#s2", "a#s9"), ("b#s3", "b#s5")]  # c: two rollouts
    out = segments.segment_summary(rows, ["good", "flat"], n_boot=50)
    assert out["n_pairs"] == 2 and out["n_decisive"] == 1  # a: +0.625; b: 0
    good, flat, grpo = (out["methods"][m] for m in ("good", "flat", "grpo"))
    assert good["sign"] == 1.0 and flat["sign"] == 0.0 and flat["flat"] == 1.0 and grpo["flat"] == 1.0
    assert good["error"] == pytest.approx((abs(0.5 - 0.625) + abs(0.1 - 0.0)) / 2)
    assert grpo["error"] == flat["error"] == pytest.approx(0.625 / 2)
    assert "| flat | 0.312" in segments.segment_table(out)


def test_same_rollout_builds_segments_that_eval_and_report_score(tmp_path, capsys):
    out = tmp_path / "cases.jsonl"
    assert main(["sveb", "build", "--model", "tiny", "--tasks", "builtin:arith?steps=1", "--problems", "3",
                 "--rollouts", "4", "--continuations", "2", "--max-new-tokens", "6", "--no-filter",
                 "--states-per-problem", "3", "--same-rollout", "--out", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    by_problem: dict = {}
    for r in records:
        by_problem.setdefault(r["problem"]["id"], set()).add(r["state"]["rollout"])
    assert len(by_problem) == 3 and all(len(rollouts) == 1 for rollouts in by_problem.values())
    assert records[0]["settings"]["same_rollout"] is True
    results = tmp_path / "r.json"
    assert main(["sveb", "eval", "--cases", str(out), "--methods", "grpo,numca", "--out", str(results)]) == 0
    data = json.loads(results.read_text())
    assert data["segments"]["n_pairs"] >= 3 and set(data["segments"]["methods"]) == {"grpo", "numca"}
    assert main(["sveb", "report", "--results", str(results), "--out", str(tmp_path / "rep")]) == 0
    assert "## Segments" in (tmp_path / "rep" / "report.md").read_text()
    capsys.readouterr()
