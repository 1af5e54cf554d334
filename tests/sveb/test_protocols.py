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
from hista.sveb import cases
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
