"""The probe estimator (docs/estimators.md "Probe"): the ridge solution by hand, what a fit reads
of a group, fits that never see the group they score (training batches, SVEB folds), and the
values and advantages of a fitted probe."""

from __future__ import annotations

import json

import pytest
import torch

from hista.cli import main
from hista.estimators import get
from hista.estimators.probe import MAX_FIT_STATES, ProbeData, features, ridge, total
from hista.sveb import cases as case_file
from hista.types import Rollout, RolloutGroup, State


def _data(x: list[list[float]], y: list[float], w: list[float]) -> ProbeData:
    """ProbeData of explicit (feature, target, weight) rows."""
    xs = torch.tensor(x, dtype=torch.float64)
    ys = torch.tensor(y, dtype=torch.float64)
    ws = torch.tensor(w, dtype=torch.float64)
    wx = ws[:, None] * xs
    return ProbeData(float(ws.sum()), wx.sum(0), wx.T @ xs, float((ws * ys).sum()), wx.T @ ys, min(y), max(y))


def test_ridge_solution_by_hand():
    """x = 0, 1, 2, 3 (weight 1 each) and y = 2x + 1: var(x) = 1.25 and cov(x, y) = 2.5, so on the
    standardised feature β = (2.5 / √1.25) / (1 + p / 4) and w = β / √1.25 = 2 / (1 + p / 4);
    b = ȳ − w·x̄ = 4 − 1.5 w. A second, constant feature gets weight 0."""
    data = _data([[0, 7], [1, 7], [2, 7], [3, 7]], [1, 3, 5, 7], [1, 1, 1, 1])
    for penalty, w in ((1e-9, 2.0), (4.0, 1.0), (12.0, 0.5)):
        fit = ridge(data, penalty)
        assert fit.w[0].item() == pytest.approx(w, rel=1e-7)
        assert fit.w[1].item() == pytest.approx(0.0, abs=1e-12)
        assert fit.b == pytest.approx(4 - 1.5 * w, rel=1e-7)
        assert fit.rollouts == 4 and (fit.low, fit.high) == (1, 7)
    assert ridge(ProbeData.empty(), 1.0) is None
    # weights count: the same rows with weight 2 are 8 rollouts, shrunk half as much
    assert ridge(_data([[0], [1], [2], [3]], [1, 3, 5, 7], [2, 2, 2, 2]), 8.0).w[0].item() == pytest.approx(1.0)
    assert (total([data, data]).xx == 2 * data.xx).all() and total([]).weight == 0


def _group(seed: int, rewards: list[float], lengths: list[int], width: int = 6, prompt: int = 3) -> RolloutGroup:
    gen = torch.Generator().manual_seed(seed)
    shared = torch.randn(prompt, width, generator=gen)
    rollouts = [Rollout(list(range(prompt)), list(range(n)), r,
                        hidden=torch.cat([shared, torch.randn(n, width, generator=gen) + r]))  # states carry R
                for r, n in zip(rewards, lengths)]
    return RolloutGroup(rollouts, prompt_id=f"p{seed}")


def test_data_weighs_each_rollout_once_and_targets_the_offset():
    group = _group(0, [1.0, 0.0, 1.0, 0.0], [5, 2, 1, MAX_FIT_STATES + 40])
    probe = get("probe", alpha=0.0)
    data = probe.data(group)
    assert data.weight == pytest.approx(3.0)  # the one-token rollout has no state 0 < t < T
    # R_i − the mean of the other three rewards: 1 − 1/3, 0 − 2/3, 0 − 2/3 (the one-token rollout has no state)
    assert data.y == pytest.approx(-2 / 3)
    assert get("probe", alpha=0.0, offset="group_mean").data(group).y == pytest.approx(-0.5)  # R − 0.5
    x = features(group.rollouts[0].hidden, 3, 0.0)
    assert torch.equal(x[1], group.rollouts[0].hidden[3])  # state t=1 is read at its last token
    assert get("probe", offset="none").data(group).y == pytest.approx(1.0)
    assert (data.low, data.high) == (0.0, 1.0)


def test_unfitted_probe_is_grpo_and_values_follow_the_fit():
    group = _group(1, [1.0, 0.0, 1.0, 0.0], [6, 7, 5, 8])
    probe = get("probe", ridge=1.0, alpha=0.0)
    states = [State(rollout=i, t=t) for i in range(4) for t in (0, 2, len(group.rollouts[i].completion_ids))]
    grpo = get("grpo", leave_one_out=True).state_values(group, states)
    values = probe.state_values(group, states)
    assert torch.allclose(values[[0, 1, 3, 4, 6, 7, 9, 10]], grpo[[0, 1, 3, 4, 6, 7, 9, 10]])
    fitted = probe.fitted(total([probe.data(_group(s, [1.0, 0.0, 1.0, 0.0], [6, 7, 5, 8])) for s in (2, 3, 4)]))
    again = fitted.state_values(group, states)
    # t = 0: the mean of the other rewards; t = T: the reward
    assert again[0] == pytest.approx(1 / 3) and again[3] == pytest.approx(2 / 3) and again[2] == 1.0
    assert again[1] > 0.5 > again[4]  # the states carry their reward: the probe reads it
    assert ((again >= 0) & (again <= 1)).all()  # clamped to the fitted rewards' range


def test_for_batch_fits_each_group_on_the_others_and_keeps_a_bounded_history():
    groups = [_group(s, [1.0, 0.0, 0.0, 1.0], [5, 6, 7, 4]) for s in range(3)]
    probe = get("probe", buffer=2)
    fitted = probe.for_batch(groups)
    for j, fit in enumerate(fitted):
        want = ridge(total([probe.data(g) for k, g in enumerate(groups) if k != j]), probe.config.ridge)
        torch.testing.assert_close(fit.fit.w, want.w)
        assert fit.fit.b == pytest.approx(want.b)
    # no rollout's own reward enters its own fit: group 0's rewards do not move its fit
    flipped = _group(0, [0.0, 1.0, 1.0, 0.0], [5, 6, 7, 4])
    again = get("probe", buffer=2).for_batch([flipped, *groups[1:]])
    torch.testing.assert_close(again[0].fit.w, fitted[0].fit.w)
    assert not torch.allclose(again[1].fit.w, fitted[1].fit.w)
    for _ in range(3):
        probe.for_batch(groups)
    assert len(probe.history) == 2  # the last two batches only
    nxt = probe.for_batch(groups[:1])[0]  # a batch of one group: fitted on the history alone
    torch.testing.assert_close(nxt.fit.w, ridge(total([probe.data(g) for g in groups] * 2), probe.config.ridge).w)


def test_the_history_comes_back_from_its_state_and_a_foreign_state_is_refused():
    """SPEC §9 (issue 41, item 5): load_state_dict(state_dict()) restores the history exactly;
    a state that is not what the probe writes (another width, a missing or extra field, NaN,
    more batches than the buffer) is an InputError naming the field, and the history stays."""
    from hista.errors import InputError

    groups = [_group(s, [1.0, 0.0, 0.0, 1.0], [5, 6, 7, 4]) for s in range(3)]
    probe = get("probe", buffer=2)
    probe.for_batch(groups)
    probe.for_batch(groups[:1])
    width = probe.history[0].x.numel()
    copy = get("probe", buffer=2)
    copy.load_state_dict(probe.state_dict(), hidden_size=width)
    for a, b in zip(probe.history, copy.history, strict=True):
        assert torch.equal(a.xx, b.xx) and a.weight == b.weight and (a.low, a.high) == (b.low, b.high)

    def damaged(change) -> dict:
        state = probe.state_dict()
        change(state["history"][0])
        return state

    for state, field in [(damaged(lambda d: d.pop("xy")), "history[0].xy"),
                         (damaged(lambda d: d.update(extra=1)), "history[0].extra"),
                         (damaged(lambda d: d["x"].__setitem__(0, float("nan"))), "history[0].x"),
                         (damaged(lambda d: d.update(y=float("inf"))), "history[0].y"),
                         ({"history": probe.state_dict()["history"] * 2}, "history"), ({}, "history")]:
        with pytest.raises(InputError) as caught:
            copy.load_state_dict(state, hidden_size=width)
        assert caught.value.field == field
    with pytest.raises(InputError, match=f"{width + 1} features"):
        copy.load_state_dict(probe.state_dict(), hidden_size=width + 1)
    assert len(copy.history) == 2


BUILD = ["sveb", "build", "--model", "tiny", "--tasks", "builtin:arith?steps=1", "--rollouts", "4",
         "--continuations", "2", "--max-new-tokens", "6", "--no-filter"]


def test_sveb_cross_fits_the_probe_by_problem(tmp_path, capsys):
    """``sveb eval --methods probe``: a case is scored by a probe fitted on the other folds of
    problems only, so changing one problem's rewards leaves its own probe values unchanged
    (``offset=none``: nothing of its group enters) while the other problems' values move."""
    path = tmp_path / "cases.jsonl"
    assert main(BUILD + ["--problems", "5", "--out", str(path)]) == 0
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for n, record in enumerate(records):  # the tiny model never answers: give the rollouts mixed rewards
        for k, rollout in enumerate(record["rollouts"]):
            rollout["reward"] = float((k + n) % 2)
        record["rollouts"][0]["reward"] = 0.5 if n % 2 else 1.0
    path.write_text("".join(case_file.dumps(r) for r in records))
    method = "probe?offset=none&ridge=1"
    first = tmp_path / "a.json"
    assert main(["sveb", "eval", "--cases", str(path), "--methods", f"grpo,{method}", "--out", str(first)]) == 0
    results = json.loads(first.read_text())
    assert results["fits"][method]["folds"] == 5 and results["layers"][method] == -2
    for k, rollout in enumerate(records[0]["rollouts"]):
        rollout["reward"] = float(k % 2 == 0)
    path.write_text("".join(case_file.dumps(r) for r in records))
    second = tmp_path / "b.json"
    assert main(["sveb", "eval", "--cases", str(path), "--methods", f"grpo,{method}", "--out", str(second)]) == 0
    before = {r["case_id"]: r["values"][method] for r in results["cases"]}
    after = {r["case_id"]: r["values"][method] for r in json.loads(second.read_text())["cases"]}
    own = records[0]["key"]
    assert after[own] == before[own]
    assert any(after[k] != before[k] for k in before if k != own)
    capsys.readouterr()


def test_sveb_cross_fit_holds_a_question_drawn_twice_in_one_fold(tmp_path, capsys):
    """A task that draws one question twice gives two problem ids with one prompt: they are one
    problem, so the copy's rewards never enter the original's probe (and rows record it)."""
    path = tmp_path / "cases.jsonl"
    assert main(BUILD + ["--problems", "5", "--out", str(path)]) == 0
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for n, record in enumerate(records):
        for k, rollout in enumerate(record["rollouts"]):
            rollout["reward"] = float((k + n) % 2)
    original = records[0]
    copy = json.loads(json.dumps(original))
    copy["key"], copy["problem"]["id"] = "zz-copy#s0", "zz-copy"
    method, values = "probe?offset=none&ridge=1", []
    for flip in (0, 1):
        for k, rollout in enumerate(copy["rollouts"]):
            rollout["reward"] = float((k + flip) % 2)
        path.write_text("".join(case_file.dumps(r) for r in records + [copy]))
        out = tmp_path / f"{flip}.json"
        assert main(["sveb", "eval", "--cases", str(path), "--methods", f"grpo,{method}", "--out", str(out)]) == 0
        results = json.loads(out.read_text())
        assert results["fits"][method]["folds"] == 5  # six problem ids, five questions
        rows = {r["case_id"]: r for r in results["cases"]}
        assert rows["zz-copy#s0"]["problem"] == rows[original["key"]]["problem"] == original["problem"]["id"]
        values.append(rows[original["key"]]["values"][method])
    assert values[0] == values[1]
    capsys.readouterr()
