"""Paired comparison with GRPO (SPEC §8): ΔMAE with a paired bootstrap interval, win/tie/loss,
slices by field, relative position and response length; its report tables and delta.png."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from hista.cli import main
from hista.sveb import eval as sveb_eval
from hista.sveb.methods import unknown_method
from hista.sveb.metrics import bootstrap_ci, summarise
from hista.sveb.paired import length_slices, paired_summary, position_slice
from hista.sveb.report import report_file, write_report
from hista.sveb.rows import CaseRow, RowState
from hista.sveb.tables import paired_markdown, paired_table, slices_table

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
METHODS = ["m", "same", "better", "gappy"]
LABELS = {"m": "M", "same": "Same", "better": "Better", "gappy": "Gappy"}


def methods_of(specs):
    """Spec -> Method of the test's method names, which no estimator reads, labelled as LABELS."""
    return {m: unknown_method(m, LABELS.get(m)) for m in specs}


def row(i, field, conts, group_mean, values, length=None, t=1):
    return CaseRow(case_id=f"p{i}#s0", field=field, target=sum(conts) / len(conts), group_mean=group_mean,
                   continuations=tuple(conts), state=RowState(rollout=0, t=t), values=values, length=length)


def four_rows():
    """Dyadic numbers, so every error and difference below is exact in floating point.

    case  target  grpo (err)    m (err, d = err - grpo err)   better (err, d)
    0     .5      .75  (.25)    .5    (0,    -.25)  win        .625 (.125, -.125)
    1     .25     0    (.25)    .125  (.125, -.125) win        .125 (.125, -.125)
    2     .75     .375 (.375)   .375  (.375,  0)    tie        .5   (.25,  -.125)
    3     .5      .625 (.125)   .75   (.25,  +.125) loss       .5   (0,    -.125)
    ``same`` is the group mean; ``gappy`` has None on case 1 and NaN on case 3.
    """
    spec = [  # field, continuations, group mean, m, better, gappy
        ("math", [1, 0], 0.75, 0.5, 0.625, 0.5),
        ("math", [1, 0, 0, 0], 0.0, 0.125, 0.125, None),
        ("science", [1, 1, 1, 0], 0.375, 0.375, 0.5, 0.75),
        ("science", [1, 0], 0.625, 0.75, 0.5, float("nan")),
    ]
    return [row(i, f, c, g, {"m": m, "same": g, "better": b, "gappy": gp})
            for i, (f, c, g, m, b, gp) in enumerate(spec)]


# --------------------------------------------------------------------------------------------
# paired_summary
# --------------------------------------------------------------------------------------------


def test_delta_mae_win_tie_loss_known():
    p = paired_summary(four_rows(), METHODS, n_boot=500)
    assert p["methods"] == METHODS and p["baseline"] == "group_mean"
    assert p["slices"]["all"] == ["all"] and p["slices"]["field"] == ["math", "science"]
    assert p["counts"]["field"] == {"math": 2, "science": 2} and p["counts"]["all"] == {"all": 4}
    cell = p["rows"]["m"]["all"]["all"]
    assert cell["mae"] == (0 + 0.125 + 0.375 + 0.25) / 4
    assert cell["grpo_mae"] == (0.25 + 0.25 + 0.375 + 0.125) / 4
    assert cell["delta"] == -0.0625
    assert (cell["win"], cell["tie"], cell["loss"]) == (0.5, 0.25, 0.25)
    assert (cell["n"], cell["skipped"]) == (4, 0)
    assert cell["lo"] <= -0.0625 <= cell["hi"] and cell["lo"] < 0 < cell["hi"] and not cell["excludes_zero"]
    values, targets = [0.5, 0.125, 0.375, 0.75], [0.5, 0.25, 0.75, 0.5]
    assert cell["pearson"] == pytest.approx(np.corrcoef(values, targets)[0, 1])
    math_cell, science_cell = p["rows"]["m"]["field"]["math"], p["rows"]["m"]["field"]["science"]
    assert math_cell["delta"] == -0.1875 and (math_cell["win"], math_cell["tie"], math_cell["loss"]) == (1, 0, 0)
    assert science_cell["delta"] == 0.0625 and (science_cell["win"], science_cell["tie"], science_cell["loss"]) == (
        0, 0.5, 0.5)


def test_interval_is_the_bootstrap_of_the_per_case_differences():
    """The method and GRPO are resampled together: the interval is the percentile bootstrap of
    the mean of d = |v - t| - |g - t|, drawn from default_rng(seed) exactly as bootstrap_ci draws."""
    rows = four_rows()
    d = np.array([-0.25, -0.125, 0.0, 0.125])
    for seed in (0, 7):
        idx = np.random.default_rng(seed).integers(0, 4, size=(300, 4))
        lo, hi = np.quantile(d[idx].mean(axis=1), [0.025, 0.975])
        cell = paired_summary(rows, ["m"], n_boot=300, seed=seed)["rows"]["m"]["all"]["all"]
        assert (cell["lo"], cell["hi"]) == (pytest.approx(lo, abs=1e-15), pytest.approx(hi, abs=1e-15))
    assert paired_summary(rows, ["m"], n_boot=300, seed=3) == paired_summary(rows, ["m"], n_boot=300, seed=3)


def shared_rows():
    """``four_rows`` as two problems of two states each: p0 (math) and p1 (science)."""
    return [replace(r, case_id=f"p{i // 2}#s{i % 2}") for i, r in enumerate(four_rows())]


def test_paired_interval_resamples_problems_when_cases_share_them():
    """m's differences are -.25, -.125 (p0) and 0, .125 (p1): a resample of two problems has the
    mean -.1875 (p0 twice), -.0625 (one of each) or .0625 (p1 twice), each end with chance 1/4."""
    p = paired_summary(shared_rows(), ["m", "better"], n_boot=2000)
    assert (p["resampled"], p["n_problems"]) == ("problems", 2)
    cell = p["rows"]["m"]["all"]["all"]
    assert (cell["delta"], cell["lo"], cell["hi"]) == (-0.0625, -0.1875, 0.0625)
    d = [-0.25, -0.125, 0.0, 0.125]
    assert (cell["lo"], cell["hi"]) == bootstrap_ci(d, n_boot=2000, clusters=["p0", "p0", "p1", "p1"])
    # the middle 20%: one problem of each, where resampling the four cases spreads out
    mid = paired_summary(shared_rows(), ["m"], n_boot=2000, level=0.2)["rows"]["m"]["all"]["all"]
    assert (mid["lo"], mid["hi"]) == (-0.0625, -0.0625)
    assert bootstrap_ci(d, n_boot=2000, level=0.2) != (-0.0625, -0.0625)
    # one problem per field: no interval (as for one case)
    field = p["rows"]["m"]["field"]["math"]
    assert field["n"] == 2 and math.isnan(field["lo"]) and math.isnan(field["hi"]) and not field["excludes_zero"]
    assert "paired bootstrap interval over problems (cases share problems) in brackets" in paired_table(p, LABELS)


def test_paired_interval_with_one_case_per_problem_resamples_cases():
    p = paired_summary(four_rows(), ["m"], n_boot=300, seed=7)
    assert (p["resampled"], p["n_problems"]) == ("cases", 4)
    cell = p["rows"]["m"]["all"]["all"]
    assert (cell["lo"], cell["hi"]) == bootstrap_ci([-0.25, -0.125, 0.0, 0.125], n_boot=300, seed=7)
    assert "paired bootstrap interval over cases in brackets" in paired_table(p, LABELS)


def test_same_as_grpo_is_all_ties_and_zero_interval():
    cell = paired_summary(four_rows(), ["same"], n_boot=200)["rows"]["same"]["all"]["all"]
    assert (cell["delta"], cell["lo"], cell["hi"]) == (0.0, 0.0, 0.0)
    assert (cell["win"], cell["tie"], cell["loss"]) == (0.0, 1.0, 0.0) and not cell["excludes_zero"]


def test_constant_improvement_gives_a_point_interval():
    """``better`` is 0.125 closer than GRPO on every case while both errors vary from case to
    case: only a paired resample gives the interval [-0.125, -0.125]."""
    p = paired_summary(four_rows(), ["better"], n_boot=1000, seed=5)
    cell = p["rows"]["better"]["all"]["all"]
    assert (cell["delta"], cell["lo"], cell["hi"]) == (-0.125, -0.125, -0.125)
    assert cell["excludes_zero"] and (cell["win"], cell["tie"], cell["loss"]) == (1.0, 0.0, 0.0)


def test_none_and_nan_values_are_skipped_and_counted():
    p = paired_summary(four_rows(), METHODS, n_boot=100)
    cell = p["rows"]["gappy"]["all"]["all"]
    # kept: case 0 (|.5-.5|=0 vs .25) and case 2 (|.75-.75|=0 vs .375)
    assert (cell["n"], cell["skipped"]) == (2, 2)
    assert cell["delta"] == (-0.25 - 0.375) / 2 and cell["mae"] == 0.0 and cell["grpo_mae"] == 0.3125
    assert [p["rows"]["gappy"]["field"][f]["skipped"] for f in ("math", "science")] == [1, 1]
    assert p["rows"]["m"]["all"]["all"]["skipped"] == 0


def test_small_and_empty_slices_give_nan_intervals():
    rows = four_rows()
    one = paired_summary(rows[:1], ["m"], n_boot=50)["rows"]["m"]["all"]["all"]
    assert one["delta"] == -0.25 and one["n"] == 1
    assert math.isnan(one["lo"]) and math.isnan(one["hi"]) and not one["excludes_zero"]
    empty = paired_summary([], ["m"], n_boot=50)
    cell = empty["rows"]["m"]["all"]["all"]
    assert cell["n"] == 0 and all(math.isnan(cell[k]) for k in ("mae", "delta", "lo", "hi", "win", "pearson"))
    assert empty["slices"]["field"] == [] and empty["length_cuts"] == [] and empty["no_length"] == 0
    # a method without any value: n 0 everywhere, every case skipped
    none = paired_summary([r.with_values({"m": None}) for r in rows], ["m"], n_boot=50)
    assert none["rows"]["m"]["all"]["all"]["skipped"] == 4 and math.isnan(none["rows"]["m"]["all"]["all"]["delta"])


def test_bad_arguments():
    with pytest.raises(ValueError, match="duplicate"):
        paired_summary(four_rows(), ["m", "m"])
    with pytest.raises(ValueError, match="n_boot"):
        paired_summary(four_rows(), ["m"], n_boot=0)


# --------------------------------------------------------------------------------------------
# position and length slices
# --------------------------------------------------------------------------------------------


def sliced_rows():
    """Six rows with lengths 10..60 (terciles {10, 20}, {30, 40}, {50, 60}) and one without."""
    # (length, t): relative positions .3, .65, 1/3, 1, .32, 2/3
    spec = [(10, 3), (20, 13), (30, 10), (40, 40), (50, 16), (60, 40)]
    rows = [row(i, "math", [1, 0], 0.75, {"m": 0.5 + 0.125 * (i % 2)}, length=n, t=t) for i, (n, t) in enumerate(spec)]
    rows.append(row(6, "math", [1, 0], 0.75, {"m": 0.5}))  # no length
    return rows


def test_position_thirds_boundaries():
    def pos(length, t):
        return position_slice(row(0, "math", [1], 0.5, {}, length=length, t=t))

    assert [pos(30, t) for t in (0, 9, 10, 19, 20, 30)] == [
        "t/T [0, 1/3)", "t/T [0, 1/3)", "t/T [1/3, 2/3)", "t/T [1/3, 2/3)", "t/T [2/3, 1]", "t/T [2/3, 1]"]
    assert pos(30, 31) is None and pos(0, 0) is None and pos(True, 0) is None and pos(30, 1.5) is None
    assert position_slice(row(0, "math", [1], 0.5, {}, t=3)) is None


def test_length_terciles_cut_points_and_labels():
    labels, cuts = length_slices(sliced_rows())
    assert cuts == pytest.approx([10 + 50 / 3, 10 + 100 / 3])
    assert labels == ["length 10-20"] * 2 + ["length 30-40"] * 2 + ["length 50-60"] * 2 + [None]
    labels, cuts = length_slices([row(0, "math", [1], 0.5, {}, length=12)] * 3)
    assert labels == ["length 12"] * 3  # every length ties: one tercile, the others are empty
    assert length_slices([row(0, "math", [1], 0.5, {}), row(1, "math", [1], 0.5, {}, length=-3)]) == ([None, None], [])


def test_position_and_length_slices_in_the_summary():
    p = paired_summary(sliced_rows(), ["m"], n_boot=100)
    assert p["slices"]["position"] == ["t/T [0, 1/3)", "t/T [1/3, 2/3)", "t/T [2/3, 1]"]
    assert p["slices"]["length"] == ["length 10-20", "length 30-40", "length 50-60"]
    assert p["counts"]["position"] == {"t/T [0, 1/3)": 2, "t/T [1/3, 2/3)": 2, "t/T [2/3, 1]": 2}
    assert p["counts"]["length"] == {"length 10-20": 2, "length 30-40": 2, "length 50-60": 2}
    assert p["no_length"] == 1 and p["counts"]["all"]["all"] == 7
    # m errs 0 on even rows (d = -.25), .125 on odd rows (d = -.125)
    # first third: rows 0 and 4 (even) -> -.25; middle: rows 1 and 2 -> -.1875; last: rows 3, 5 -> -.125
    delta = {k: c["delta"] for k, c in p["rows"]["m"]["position"].items()}
    assert delta == {"t/T [0, 1/3)": -0.25, "t/T [1/3, 2/3)": -0.1875, "t/T [2/3, 1]": -0.125}
    assert {k: c["delta"] for k, c in p["rows"]["m"]["length"].items()} == dict.fromkeys(p["slices"]["length"],
                                                                                          -0.1875)
    assert p["rows"]["m"]["all"]["all"]["n"] == 7


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------


def test_paired_tables_show_the_numbers():
    p = paired_summary(four_rows(), METHODS, n_boot=200)
    table = paired_table(p, LABELS)
    lines = table.splitlines()
    assert lines[2] == "| Estimator | Math | Science | All |"
    better = next(line for line in lines if line.startswith("| Better |"))
    assert better.endswith("| -0.125 [-0.125, -0.125]* · win 100% |")
    same = next(line for line in lines if line.startswith("| Same |"))
    assert same.endswith("| +0.000 [+0.000, +0.000] · win 0%, tie 100% |")
    m = next(line for line in lines if line.startswith("| M |"))
    assert m.startswith("| M | -0.188 [") and "* · win 100% |" in m  # math: both cases lose .25 / .125
    assert "-0.062 [" in m and "win 50%, tie 25% |" in m
    assert "Cases: Math 2, Science 2, All 4." in lines[0]
    assert "No case records its response length" in slices_table(p, LABELS)


def test_slices_table_columns():
    p = paired_summary(sliced_rows(), ["m"], n_boot=100)
    lines = slices_table(p, LABELS).splitlines()
    assert lines[2] == ("| Estimator | t/T [0, 1/3) | t/T [1/3, 2/3) | t/T [2/3, 1] | length 10-20 | length 30-40 "
                        "| length 50-60 |")
    assert lines[4].startswith("| M | -0.250 [-0.250, -0.250]* · win 100% | -0.188 [")
    assert "1 cases without a recorded length are left out" in lines[0]


def test_write_report_writes_delta_png_and_paired_json(tmp_path):
    rows = [replace(r, length=n) for r, n in zip(four_rows(), (8, 16, 24, 32))]
    s = summarise(rows, METHODS, n_boot=200)
    paths = write_report(s, rows, methods_of(METHODS), tmp_path)
    assert paths["delta_plot"] == tmp_path / "delta.png"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "delta.png", "differences.png", "mae.png", "report.json", "report.md"]
    assert paths["delta_plot"].read_bytes()[:8] == PNG_SIGNATURE and paths["delta_plot"].stat().st_size > 5000
    payload = json.loads(paths["json"].read_text(encoding="utf-8"))
    paired = payload["paired"]
    assert paired["n_boot"] == 200 and paired["seed"] == 0
    assert paired["rows"]["better"]["all"]["all"]["delta"] == -0.125
    assert paired["rows"]["gappy"]["field"]["math"]["lo"] is None  # one case: no interval, NaN -> null
    md = paths["markdown"].read_text(encoding="utf-8")
    # both tables, as eval prints them
    assert paired_markdown(paired_summary(rows, METHODS, n_boot=200, seed=0), LABELS) in md
    assert "## Paired comparison with GRPO" in md and md.index("## Paired") > md.index("| Better |")
    assert "| -0.125 [-0.125, -0.125]* · win 100% |" in md and "t/T [0, 1/3)" in md and "length 8-16" in md
    assert "(delta.png)" in md


def test_write_report_accepts_a_given_paired_dict(tmp_path):
    rows = four_rows()
    given = paired_summary(rows, ["m"], n_boot=20, seed=9)
    paths = write_report(summarise(rows, ["m"], n_boot=20), rows, methods_of(["m"]), tmp_path, paired=given)
    assert json.loads(paths["json"].read_text())["paired"]["seed"] == 9


def test_empty_benchmark_report_has_a_delta_plot(tmp_path):
    paths = write_report(summarise([], ["grpo"], n_boot=10), [], methods_of(["grpo"]), tmp_path)
    assert paths["delta_plot"].read_bytes()[:8] == PNG_SIGNATURE


def test_sveb_report_from_a_results_file_with_lengths(tmp_path):
    methods = ["m", "better"]
    rows = [replace(r, length=n, values={k: r.values[k] for k in methods})
            for r, n in zip(four_rows(), (8, 16, 24, 32))]
    data = {"methods": {k: {"name": k, "config": {}} for k in methods}, "labels": LABELS,
            "cases": [r.to_json() for r in rows],
            "summary": {"n_boot": 100, "seed": 4}}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    paths, _ = report_file(path, tmp_path / "report")
    paired = json.loads(paths["json"].read_text())["paired"]
    assert (paired["n_boot"], paired["seed"]) == (100, 4)
    assert paired == json.loads(json.dumps(paired_summary(rows, methods, n_boot=100, seed=4)).replace("NaN", "null"))
    assert (tmp_path / "report" / "delta.png").exists()


def _printed_by_sveb_eval(rows, tmp_path, monkeypatch, capsys) -> str:
    """What `hista sveb eval` prints for results holding ``rows`` (its evaluation replaced)."""
    results = {"methods": {k: {} for k in METHODS}, "labels": LABELS, "cases": rows,
               "summary": summarise(rows, METHODS, n_boot=50, seed=2),
               "paired": paired_summary(rows, METHODS, n_boot=50, seed=2)}
    monkeypatch.setattr(sveb_eval, "evaluate", lambda *args, **kwargs: results)
    assert main(["sveb", "eval", "--cases", str(tmp_path / "cases.jsonl"), "--methods", "m",
                 "--out", str(tmp_path / "r.json")]) == 0
    return capsys.readouterr().out


def test_sveb_eval_prints_the_paired_tables(tmp_path, monkeypatch, capsys):
    rows = four_rows()
    out = _printed_by_sveb_eval(rows, tmp_path, monkeypatch, capsys)
    assert paired_markdown(paired_summary(rows, METHODS, n_boot=50, seed=2), LABELS) in out
    assert out.index("paired comparison with GRPO") > out.index("| Estimator |")


def test_sveb_eval_says_the_intervals_resample_problems(tmp_path, monkeypatch, capsys):
    out = _printed_by_sveb_eval(shared_rows(), tmp_path, monkeypatch, capsys)
    assert "95% bootstrap interval over problems (cases share problems) in brackets" in out  # the MAE table
    assert "95% paired bootstrap interval over problems (cases share problems) in brackets" in out
    assert "over cases" not in out
