"""SVEB metrics and report (SPEC §8): MCS@n noise, bootstrap, Pearson, summary, table, plots."""

from __future__ import annotations

import json
import math
import random
import warnings
from dataclasses import replace
from fractions import Fraction
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest

from hista.sveb.figures import plot_differences, plot_mae
from hista.sveb.methods import build_methods
from hista.sveb.metrics import MAX_MCS_TERMS, bootstrap_ci, mcs_error, pearson, summarise
from hista.sveb.report import write_report
from hista.sveb.rows import CaseRow
from hista.sveb.tables import markdown_table

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def brute(rewards, n):
    """E|mean(S) - mean(all)| over every n-subset S, in exact rational arithmetic."""
    vals = [Fraction(r) for r in rewards]
    full = sum(vals) / len(vals)
    subsets = list(combinations(vals, n))
    return float(sum(abs(sum(s) / n - full) for s in subsets) / len(subsets))


# --------------------------------------------------------------------------------------------
# mcs_error
# --------------------------------------------------------------------------------------------


def test_mcs_error_hand_computed():
    # [1, 0], n=1: either draw is 0.5 away from the mean 0.5.
    assert mcs_error([1, 0], 1) == pytest.approx(0.5)
    # [1, 1, 0, 0], n=2: of the C(4,2)=6 pairs, {1,1} and {0,0} (2 of 6 = 1/3) are 1/2 away
    # from the mean 1/2, the 4 mixed pairs are exact: 1/3 * 1/2 = 1/6.
    assert mcs_error([1, 1, 0, 0], 2) == pytest.approx(1 / 6)
    # [1, 0, 0, 0], n=1: the one (p=1/4) is 3/4 away, a zero (p=3/4) is 1/4 away: 3/8.
    assert mcs_error([1, 0, 0, 0], 1) == pytest.approx(3 / 8)
    # [1, 0, 0, 0], n=3: 3 of 4 triples hold the one (mean 1/3, 1/12 away), one does not
    # (mean 0, 1/4 away): (3/12 + 1/4) / 4 = 1/8.
    assert mcs_error([1, 0, 0, 0], 3) == pytest.approx(1 / 8)
    # [1, 1, 0], n=2: {1,1} is 1/3 away, the two {1,0} are 1/6 away: (1/3 + 2/6) / 3 = 2/9.
    assert mcs_error([1, 1, 0], 2) == pytest.approx(2 / 9)
    # Non-binary: [0, 0.5, 1], n=1: |0-.5| + 0 + |1-.5| over 3 = 1/3.
    assert mcs_error([0.0, 0.5, 1.0], 1) == pytest.approx(1 / 3)


def test_mcs_error_edge_cases():
    assert mcs_error([1, 0, 1], 3) == 0.0  # n == M
    assert mcs_error([1], 1) == 0.0
    assert mcs_error([0.3] * 7, 2) == 0.0  # constant rewards
    assert mcs_error([1] * 20, 1) == 0.0
    with pytest.raises(ValueError):
        mcs_error([1, 0], 3)  # n > M
    with pytest.raises(ValueError):
        mcs_error([], 1)
    with pytest.raises(ValueError):
        mcs_error([1, 0], 0)
    with pytest.raises(ValueError):
        mcs_error([1, float("nan")], 1)


def test_mcs_error_hypergeometric_matches_enumeration():
    rng = random.Random(0)
    for _ in range(60):
        m = rng.randint(1, 12)
        rewards = [rng.randint(0, 1) for _ in range(m)]
        n = rng.randint(1, min(m, 4))
        assert mcs_error(rewards, n) == pytest.approx(brute(rewards, n), abs=1e-12)
    # booleans and floats 0.0/1.0 are binary rewards too
    assert mcs_error([True, False, False], 1) == pytest.approx(brute([1, 0, 0], 1))
    assert mcs_error([1.0, 0.0, 0.0, 1.0, 1.0], 2) == pytest.approx(brute([1, 0, 0, 1, 1], 2))


def test_mcs_error_non_binary_matches_enumeration():
    rng = random.Random(1)
    for _ in range(40):
        m = rng.randint(2, 9)
        # partial-credit rewards with repeats (e.g. fraction of tests passed)
        rewards = [rng.choice([0.0, 0.25, 0.5, 0.75, 1.0]) for _ in range(m)]
        n = rng.randint(1, min(m, 3))
        assert mcs_error(rewards, n) == pytest.approx(brute(rewards, n), abs=1e-12)
    # all-distinct rewards at the paper's scale: M=32 (> MCS@20), n=3 -> C(32,3)=4960 subsets
    rewards = [rng.random() for _ in range(32)]
    for n in (1, 2, 3):
        assert mcs_error(rewards, n) == pytest.approx(brute(rewards, n), abs=1e-12)


def test_mcs_error_decreases_with_n_and_refuses_huge_enumeration():
    rewards = [1] * 7 + [0] * 13  # M = 20, as in the paper's MCS@20 reference
    errs = [mcs_error(rewards, n) for n in range(1, 21)]
    assert all(a > b for a, b in zip(errs, errs[1:]))
    assert errs[-1] == 0.0
    # binary vectors never need enumeration, however large
    assert 0 < mcs_error([1] * 100 + [0] * 100, 50) < 0.1
    assert 0 < mcs_error([1] * 1500 + [0] * 1500, 1000) < 0.02  # binomials beyond float range
    # many distinct values (deeper than Python's recursion limit), n=1: mean |r - mean|
    rewards = [((i * 37) % 1501) / 1500 for i in range(1501)]
    full = sum(rewards) / len(rewards)
    assert mcs_error(rewards, 1) == pytest.approx(sum(abs(r - full) for r in rewards) / len(rewards))
    # non-binary with too many distinct values and subsets is refused, not left running
    assert math.comb(200, 10) > MAX_MCS_TERMS
    with pytest.raises(ValueError, match="too many"):
        mcs_error([i / 200 for i in range(200)], 10)


# --------------------------------------------------------------------------------------------
# bootstrap_ci
# --------------------------------------------------------------------------------------------


def test_bootstrap_ci_deterministic_and_contains_mean():
    rng = np.random.default_rng(3)
    errors = rng.random(200).tolist()
    a = bootstrap_ci(errors, n_boot=1000, seed=5)
    b = bootstrap_ci(errors, n_boot=1000, seed=5)
    assert a == b
    assert bootstrap_ci(errors, n_boot=1000, seed=6) != a
    lo, hi = a
    assert lo < float(np.mean(errors)) < hi
    # standard error of the mean of U(0,1) with 200 draws is ~0.02: a 95% width of ~0.08
    assert 0.04 < hi - lo < 0.12
    lo50, hi50 = bootstrap_ci(errors, n_boot=1000, seed=5, level=0.5)
    assert lo < lo50 < hi50 < hi


def test_bootstrap_ci_edge_cases():
    assert bootstrap_ci([0.3]) == (0.3, 0.3)
    assert bootstrap_ci([0.1, 0.1, 0.1]) == (0.1, 0.1)
    lo, hi = bootstrap_ci([])
    assert math.isnan(lo) and math.isnan(hi)
    lo, hi = bootstrap_ci([float("nan")])
    assert math.isnan(lo) and math.isnan(hi)
    assert bootstrap_ci([0.2, float("nan")]) == (0.2, 0.2)  # NaN entries are ignored
    with pytest.raises(ValueError):
        bootstrap_ci([1.0, 2.0], level=1.0)
    with pytest.raises(ValueError):
        bootstrap_ci([1.0, 2.0], n_boot=0)


def test_bootstrap_ci_resamples_problems_when_cases_share_them():
    """Problem a holds three cases with error 0, problem b one with error 1. A resample draws two
    problems: (a, a) -> 0, (a, b) -> 1/4 (sum 1 over 4 cases, not the mean 1/2 of the problem
    means), (b, b) -> 1, with probabilities 1/4, 1/2, 1/4."""
    errors, clusters = [0.0, 0.0, 0.0, 1.0], ["a", "a", "a", "b"]
    lo, hi = bootstrap_ci(errors, n_boot=2000, seed=0, clusters=clusters)
    assert (lo, hi) == (0.0, 1.0)
    assert bootstrap_ci(errors, n_boot=2000, seed=0, level=0.2, clusters=clusters) == (0.25, 0.25)
    # resampling the four cases as if independent: P(mean = 1) = 1/256, so the interval ends at 3/4
    assert bootstrap_ci(errors, n_boot=2000, seed=0) == (0.0, 0.75)
    # NaN entries are dropped with their labels; a label that no longer repeats: case resampling
    assert bootstrap_ci([0.0, math.nan, 0.0, 0.0, 1.0], n_boot=500, seed=4, clusters=["a", "b", "a", "a", "b"]) == \
        bootstrap_ci(errors, n_boot=500, seed=4, clusters=clusters)
    assert bootstrap_ci([0.0, math.nan, 1.0], n_boot=500, seed=4, clusters=["a", "a", "b"]) == \
        bootstrap_ci([0.0, 1.0], n_boot=500, seed=4)
    with pytest.raises(ValueError, match="cluster labels"):
        bootstrap_ci(errors, clusters=["a", "b"])


def test_bootstrap_ci_over_problems_is_wider_when_cases_of_a_problem_agree():
    """Two cases per problem with the same error: 40 cases but only 20 independent problems,
    so the problem interval is about sqrt(2) times as wide as the (too narrow) case interval."""
    per_problem = np.random.default_rng(1).random(20)
    errors = np.repeat(per_problem, 2).tolist()
    clusters = [f"p{k // 2}" for k in range(40)]
    lo, hi = bootstrap_ci(errors, n_boot=4000, seed=0, clusters=clusters)
    case_lo, case_hi = bootstrap_ci(errors, n_boot=4000, seed=0)
    assert lo < float(np.mean(errors)) < hi
    assert hi - lo > 1.2 * (case_hi - case_lo)
    # the same interval as resampling the 20 problem errors themselves (equal-sized problems)
    assert (lo, hi) == pytest.approx(bootstrap_ci(per_problem.tolist(), n_boot=4000, seed=0), abs=1e-12)


def test_bootstrap_ci_with_one_case_per_problem_is_the_case_bootstrap():
    """Labels that never repeat leave the interval exactly as without them, and that is the
    percentile bootstrap of resampled cases drawn from default_rng(seed)."""
    errors = np.random.default_rng(3).random(200)
    for seed, n_boot in ((0, 1000), (5, 300)):
        plain = bootstrap_ci(errors.tolist(), n_boot=n_boot, seed=seed)
        assert bootstrap_ci(errors.tolist(), n_boot=n_boot, seed=seed, clusters=[f"p{k}" for k in range(200)]) == plain
        idx = np.random.default_rng(seed).integers(0, 200, size=(n_boot, 200))
        assert plain == tuple(float(q) for q in np.quantile(errors[idx].mean(axis=1), [0.025, 0.975]))


# --------------------------------------------------------------------------------------------
# pearson
# --------------------------------------------------------------------------------------------


def test_pearson_values_and_edge_cases():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
        assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
        x, y = [0.1, 0.5, 0.2, 0.9, 0.4], [0.0, 0.6, 0.1, 1.0, 0.2]
        assert pearson(x, y) == pytest.approx(np.corrcoef(x, y)[0, 1])
        for a, b in [([], []), ([1.0], [2.0]), ([1, 1, 1], [1, 2, 3]), ([1, 2, 3], [5, 5, 5]),
                     ([0.1, 0.1], [0.2, 0.2]), ([1, float("nan")], [1, 2])]:
            assert math.isnan(pearson(a, b))
        # NaN pairs are dropped, the rest are used
        assert pearson([1, 2, float("nan"), 3], [1, 2, 9, 3]) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        pearson([1, 2], [1, 2, 3])


# --------------------------------------------------------------------------------------------
# summarise, on six hand-made cases over two fields
# --------------------------------------------------------------------------------------------

METHODS = ["grpo", "numca-reference", "hista"]
LABELS = {"grpo": "GRPO", "numca-reference": "Numca-reference", "hista": "Hista"}


def _records():
    def rec(i, field, conts, group_mean, values):
        return CaseRow(case_id=f"c{i}", field=field, target=sum(conts) / len(conts), group_mean=group_mean,
                       continuations=tuple(conts), values=values)

    return [
        # math: grpo |.4-.5|=.1, |.45-.25|=.2, |.7-1|=.3 -> 0.2; hista 0, .1, .2 -> 0.1;
        # numca .3, (NaN: skipped), .1 -> 0.2 over 2 cases.
        rec(1, "math", [1, 0], 0.4, {"grpo": 0.4, "numca-reference": 0.8, "hista": 0.5}),
        rec(2, "math", [1, 0, 0, 0], 0.45, {"grpo": 0.45, "numca-reference": float("nan"), "hista": 0.35}),
        rec(3, "math", [1, 1], 0.7, {"grpo": 0.7, "numca-reference": 0.9, "hista": 0.8}),
        # science: grpo .1, 0, 1/6 -> 0.0889; hista .05, .1, 0 -> 0.05; numca .1 (missing, None).
        rec(4, "science", [0, 0, 0], 0.1, {"grpo": 0.1, "numca-reference": 0.1, "hista": 0.05}),
        rec(5, "science", [1, 0, 1, 0], 0.5, {"grpo": 0.5, "hista": 0.6}),
        rec(6, "science", [1, 1, 0], 0.5, {"grpo": 0.5, "numca-reference": None, "hista": 2 / 3}),
    ]


def test_summarise_known_maes():
    recs = _records()
    s = summarise(recs, METHODS, n_boot=500)
    assert s["fields"] == ["math", "science", "all"]
    assert list(s["rows"]) == METHODS + ["MCS@1", "MCS@2", "MCS@3"]
    assert s["counts"] == {"math": 3, "science": 3, "all": 6}
    rows = s["rows"]

    expect = {
        "grpo": {"math": 0.2, "science": (0.1 + 0 + 1 / 6) / 3, "all": (0.6 + 0.1 + 1 / 6) / 6},
        "hista": {"math": 0.1, "science": 0.05, "all": 0.45 / 6},
        "numca-reference": {"math": 0.2, "science": 0.1, "all": 0.5 / 3},
    }
    for method, per_field in expect.items():
        for field, mae in per_field.items():
            cell = rows[method][field]
            assert cell["mae"] == pytest.approx(mae), (method, field)
            assert cell["lo"] <= cell["mae"] + 1e-12 and cell["mae"] <= cell["hi"] + 1e-12
            assert set(cell) >= {"mae", "lo", "hi", "pearson", "n", "skipped"}
    assert rows["grpo"]["all"]["n"] == 6 and rows["grpo"]["all"]["skipped"] == 0
    assert (rows["numca-reference"]["math"]["n"], rows["numca-reference"]["math"]["skipped"]) == (2, 1)
    assert (rows["numca-reference"]["science"]["n"], rows["numca-reference"]["science"]["skipped"]) == (1, 2)
    assert rows["numca-reference"]["science"]["lo"] == rows["numca-reference"]["science"]["hi"] == pytest.approx(0.1)
    assert rows["numca-reference"]["all"]["skipped"] == 3

    targets = [r.target for r in recs]
    hista = [r.values["hista"] for r in recs]
    assert rows["hista"]["all"]["pearson"] == pytest.approx(np.corrcoef(hista, targets)[0, 1])
    assert math.isnan(rows["numca-reference"]["science"]["pearson"])  # one point

    assert s["grpo_mae"] == {f: rows["grpo"][f]["mae"] for f in s["fields"]}
    # the GRPO MAE comes from the group mean each case records, whatever methods ran
    assert summarise(recs, ["hista"], n_boot=50)["grpo_mae"] == s["grpo_mae"]

    # MCS rows: per-case exact errors (see test_mcs_error_hand_computed), mean over cases.
    mcs1 = [0.5, 3 / 8, 0.0, 0.0, 0.5, 4 / 9]
    mcs2 = [0.0, 0.25, 0.0, 0.0, 1 / 6, 2 / 9]
    mcs3 = [None, 1 / 8, None, 0.0, 1 / 6, 0.0]  # M = 2 < 3: skipped
    assert rows["MCS@1"]["math"]["mae"] == pytest.approx(sum(mcs1[:3]) / 3)
    assert rows["MCS@1"]["science"]["mae"] == pytest.approx(sum(mcs1[3:]) / 3)
    assert rows["MCS@2"]["all"]["mae"] == pytest.approx(sum(mcs2) / 6)
    assert rows["MCS@3"]["math"]["mae"] == pytest.approx(1 / 8)
    assert (rows["MCS@3"]["math"]["n"], rows["MCS@3"]["math"]["skipped"]) == (1, 2)
    assert rows["MCS@3"]["all"]["mae"] == pytest.approx(sum(e for e in mcs3 if e is not None) / 4)
    assert all(math.isnan(rows[r][f]["pearson"]) for r in ("MCS@1", "MCS@2", "MCS@3") for f in s["fields"])

    # deterministic
    assert json.dumps(summarise(recs, METHODS, n_boot=500), sort_keys=True) == json.dumps(s, sort_keys=True)


def test_summarise_degenerate_inputs():
    s = summarise([], ["grpo"], n_boot=50)
    assert s["fields"] == ["all"] and s["counts"] == {"all": 0}
    assert s["rows"]["grpo"]["all"]["n"] == 0 and math.isnan(s["rows"]["grpo"]["all"]["mae"])
    s = summarise(_records(), ["mc"], mcs=(1,), n_boot=50)  # method absent from every case
    assert s["rows"]["mc"]["all"]["skipped"] == 6
    assert "grpo_mae" not in summarise([replace(r, group_mean=None) for r in _records()], ["mc"], mcs=(1,), n_boot=50)
    assert list(s["rows"]) == ["mc", "MCS@1"]
    with pytest.raises(ValueError):
        summarise([CaseRow(case_id="c", field="all", target=0.5, continuations=(0.5,), values={})], ["grpo"])
    with pytest.raises(ValueError):
        summarise(_records(), ["grpo", "grpo"])


def test_summarise_records_the_resampling():
    one_each = summarise(_records(), METHODS, n_boot=200)
    assert (one_each["resampled"], one_each["n_problems"]) == ("cases", 6)
    errors = [abs(r.values["hista"] - r.target) for r in _records()]
    assert (one_each["rows"]["hista"]["all"]["lo"], one_each["rows"]["hista"]["all"]["hi"]) == \
        bootstrap_ci(errors, n_boot=200)

    shared = [replace(r, case_id=f"p{i // 2}#s{i % 2}") for i, r in enumerate(_records())]  # 3 problems, 2 cases each
    s = summarise(shared, METHODS, n_boot=200)
    assert (s["resampled"], s["n_problems"]) == ("problems", 3)
    clusters = ["p0", "p0", "p1", "p1", "p2", "p2"]
    assert (s["rows"]["hista"]["all"]["lo"], s["rows"]["hista"]["all"]["hi"]) == \
        bootstrap_ci(errors, n_boot=200, clusters=clusters)
    assert (s["rows"]["hista"]["all"]["lo"], s["rows"]["hista"]["all"]["hi"]) != \
        (one_each["rows"]["hista"]["all"]["lo"], one_each["rows"]["hista"]["all"]["hi"])
    mcs1 = [mcs_error(r.continuations, 1) for r in shared]
    assert (s["rows"]["MCS@1"]["all"]["lo"], s["rows"]["MCS@1"]["all"]["hi"]) == \
        bootstrap_ci(mcs1, n_boot=200, clusters=clusters)
    # the maes do not move
    assert all(s["rows"][m][f]["mae"] == one_each["rows"][m][f]["mae"] for m in METHODS for f in s["fields"])
    assert markdown_table(s).count("bootstrap interval over problems (cases share problems)") == 1
    assert "bootstrap interval over cases" in markdown_table(one_each)
    # rows that record their problem (sveb eval: cases sharing a prompt are one) go by it, not by the id
    asked_twice = [replace(r, problem=f"q{i // 3}") for i, r in enumerate(_records())]  # 6 ids, 2 questions
    q = summarise(asked_twice, METHODS, n_boot=200)
    assert (q["resampled"], q["n_problems"]) == ("problems", 2)
    assert (q["rows"]["hista"]["all"]["lo"], q["rows"]["hista"]["all"]["hi"]) == \
        bootstrap_ci(errors, n_boot=200, clusters=[f"q{i // 3}" for i in range(6)])


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------


def test_markdown_table_layout_bold_labels_counts():
    s = summarise(_records(), METHODS, n_boot=500)
    table = markdown_table(s, LABELS)
    lines = table.strip().splitlines()
    assert "Math 3" in lines[0] and "Science 3" in lines[0] and "All 6" in lines[0]
    header = next(line for line in lines if line.startswith("| Estimator"))
    assert header.split("|")[2:5] == [" Math ↓ ", " Science ↓ ", " All ↓ "]
    body = [line for line in lines if line.startswith("| ") and not line.startswith(("| Estimator", "| ---"))]
    assert [line.split("|")[1].strip() for line in body] == [
        "GRPO", "Numca-reference", "Hista", "MCS@1", "MCS@2", "MCS@3"]
    cells = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in body}
    h = s["rows"]["hista"]["math"]
    assert cells["Hista"][0] == f"**{h['mae']:.3f} [{h['lo']:.3f}, {h['hi']:.3f}]**"
    assert all(c.startswith("**") for c in cells["Hista"])  # best estimator in every column
    assert not any(c.startswith("**") for c in cells["GRPO"] + cells["Numca-reference"])
    # MCS@2 on math (0.083) beats every estimator there, but MCS rows are never bold
    assert s["rows"]["MCS@2"]["math"]["mae"] < h["mae"]
    assert not any("**" in c for r in ("MCS@1", "MCS@2", "MCS@3") for c in cells[r])
    assert cells["GRPO"][0].startswith("0.200 [")
    # without labels the keys are shown
    assert "| numca-reference |" in markdown_table(s)


def test_markdown_table_ties_and_empty_cells():
    recs = _records()
    for r in recs:
        r.values["copy"] = r.values["hista"]
    s = summarise(recs, ["grpo", "hista", "copy"], n_boot=100)
    body = [line for line in markdown_table(s).splitlines() if line.startswith(("| hista", "| copy"))]
    assert all(line.count("**") == 2 * 3 for line in body)  # ties are all bold
    s = summarise([], ["grpo"], n_boot=10)
    assert "| grpo | – |" in markdown_table(s)


def test_plots_and_write_report(tmp_path):
    recs = _records()
    s = summarise(recs, METHODS, n_boot=200)
    p1 = plot_mae(s, tmp_path / "a" / "mae.png")
    p2 = plot_differences(recs, build_methods(METHODS), tmp_path / "diff.png")
    for p in (p1, p2):
        data = p.read_bytes()
        assert data[:8] == PNG_SIGNATURE and len(data) > 5000

    out = tmp_path / "report"
    paths = write_report(s, recs, build_methods(METHODS), out)  # labelled as LABELS
    assert set(paths) == {"markdown", "json", "mae_plot", "differences_plot", "delta_plot"}
    assert {p.name for p in paths.values()} == {"report.md", "report.json", "mae.png", "differences.png", "delta.png"}
    assert sorted(p.name for p in out.iterdir()) == ["delta.png", "differences.png", "mae.png", "report.json",
                                                     "report.md"]
    md = paths["markdown"].read_text(encoding="utf-8")
    assert md.startswith("# SVEB report")
    assert markdown_table(s, LABELS) in md
    assert "(mae.png)" in md and "(differences.png)" in md
    payload = json.loads(paths["json"].read_text(encoding="utf-8"))  # strict JSON: NaN -> null
    assert payload["labels"] == LABELS
    assert payload["summary"]["rows"]["hista"]["math"]["mae"] == pytest.approx(0.1)
    assert payload["summary"]["rows"]["MCS@1"]["all"]["pearson"] is None
    for p in (paths["mae_plot"], paths["differences_plot"]):
        assert p.read_bytes()[:8] == PNG_SIGNATURE


def test_write_report_on_empty_benchmark(tmp_path):
    s = summarise([], ["grpo", "hista"], n_boot=10)
    paths = write_report(s, [], build_methods(["grpo", "hista"]), tmp_path)
    assert all(p.read_bytes() for p in paths.values())
    assert paths["differences_plot"].read_bytes()[:8] == PNG_SIGNATURE


def test_the_table_says_which_cases_a_method_left_out():
    """A method without a finite value on a case is named under the table, not dropped silently."""
    from hista.sveb import metrics, tables

    results = json.loads((Path(__file__).parents[1] / "data" / "sveb_results_tiny.json").read_text())
    rows = [CaseRow.from_json(row) for row in results["cases"]]
    assert "left out" not in tables.markdown_table(metrics.summarise(rows, list(results["methods"]), n_boot=50))
    rows[0].values["numca"] = None
    table = tables.markdown_table(metrics.summarise(rows, list(results["methods"]), n_boot=50), results["labels"])
    assert "left out of a row because the method gave no finite value: Numca (1 of 2 cases)." in table
