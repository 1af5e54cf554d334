"""SVEB report with PPO critic methods (SPEC §4.5, §8): the paper's Table 1 layout (λ columns,
GRPO under "no λ"), the paper's names for the PPO rows of the Table-4 table, and the
differences V − V_GRPO of Figure 2 (panel order, std and mean |V − V_GRPO|, in report.json)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from hista.sveb import figures as sveb_figures
from hista.sveb.figures import difference_stats
from hista.sveb.labels import report_labels
from hista.sveb.methods import build_methods
from hista.sveb.metrics import summarise
from hista.sveb.report import write_report
from hista.sveb.rows import CaseRow
from hista.sveb.tables import markdown_table, table1, table1_markdown

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PPO_METHODS = ["grpo", "hista", "ppo-1?lam=0.95", "ppo-n?lam=0.95", "ppo-1", "numca", "ppo-n?lam=1.0"]
# V − V_GRPO of each method on the four cases (dyadic, so every number below is exact)
OFFSETS = {
    "grpo": [0.0, 0.0, 0.0, 0.0],
    "hista": [0.25, 0.25, -0.25, 0.0],
    "ppo-1?lam=0.95": [0.25, -0.25, 0.125, -0.125],
    "ppo-n?lam=0.95": [0.125, 0.0, 0.0, -0.125],
    "ppo-1": [0.125, -0.125, 0.125, -0.125],
    "numca": [0.5, None, -0.25, 0.25],  # no value on case 1: three cases
    "ppo-n?lam=1.0": [0.0, 0.0, 0.0, 0.0625],
}


def _records(methods=PPO_METHODS):
    """Four cases, two fields, group mean 0.5, each method's value the group mean + its offset."""
    conts = [[1, 1, 0, 1], [0, 0, 0, 1], [1, 0, 1, 0], [1, 1, 1, 1]]
    return [CaseRow(case_id=f"c{i}", field="math" if i < 2 else "science", target=sum(c) / len(c),
                    group_mean=0.5, continuations=tuple(c),
                    values={m: None if OFFSETS[m][i] is None else 0.5 + OFFSETS[m][i] for m in methods})
            for i, c in enumerate(conts)]


def _methods(methods=PPO_METHODS):
    """Spec -> Method, as sveb eval builds them (labels ``PPO-N?lam=0.95``)."""
    return build_methods(methods, critics=True)


def _labels(methods=PPO_METHODS):
    """The labels the report prints (``PPO-N (λ=0.95)``)."""
    return report_labels(_methods(methods))


def _table_rows(text, first_cell):
    """Row name -> cells of the markdown table whose header starts with ``| first_cell |``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_cell} |"))
    header = [c.strip() for c in lines[start].split("|")[1:-1]]
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in line.split("|")[1:-1]]
        rows[cells[0]] = cells[1:]
    return header, rows


def _cell(summary, m):
    c = summary["rows"][m]["all"]
    return f"{c['mae']:.3f} [{c['lo']:.3f}, {c['hi']:.3f}]"


def test_table1_puts_grpo_under_no_lambda_and_ppo_rows_in_their_lambda_columns(tmp_path):
    recs = _records()
    s = summarise(recs, PPO_METHODS, n_boot=200)
    paths = write_report(s, recs, _methods(), tmp_path)
    md = paths["markdown"].read_text(encoding="utf-8")
    assert "## PPO critics (paper Table 1 layout)" in md
    section = md.split("## PPO critics (paper Table 1 layout)")[1].split("## Paired comparison")[0]
    header, rows = _table_rows(section, "Method")
    assert header == ["Method", "λ = 0.95", "λ = 1.0", "no λ"]
    assert list(rows) == ["GRPO", "PPO-1", "PPO-N"]  # Numca and Hista are not in Table 1
    assert rows["GRPO"] == ["–", "–", _cell(s, "grpo")]
    assert rows["PPO-1"] == [_cell(s, "ppo-1?lam=0.95"), _cell(s, "ppo-1"), "–"]  # no lam: λ = 1.0
    assert rows["PPO-N"] == [_cell(s, "ppo-n?lam=0.95"), _cell(s, "ppo-n?lam=1.0"), "–"]
    # ppo-n?lam=1.0 is off by 0.0625 on one case: MAE(ppo-n, λ=1) = MAE(grpo) ± 0.0625 / 4
    assert abs(s["rows"]["ppo-n?lam=1.0"]["all"]["mae"] - s["rows"]["grpo"]["all"]["mae"]) == 0.015625

    payload = json.loads(paths["json"].read_text(encoding="utf-8"))
    t1 = payload["table1"]
    assert t1["columns"] == ["λ = 0.95", "λ = 1.0", "no λ"]
    assert [r["label"] for r in t1["rows"]] == ["GRPO", "PPO-1", "PPO-N"]
    assert t1["rows"][0]["cells"] == {"no λ": {"method": "grpo", "mae": s["rows"]["grpo"]["all"]["mae"],
                                              "lo": s["rows"]["grpo"]["all"]["lo"],
                                              "hi": s["rows"]["grpo"]["all"]["hi"], "n": 4}}
    assert {c: v["method"] for c, v in t1["rows"][2]["cells"].items()} == {"λ = 0.95": "ppo-n?lam=0.95",
                                                                         "λ = 1.0": "ppo-n?lam=1.0"}


def test_no_table1_without_ppo_rows(tmp_path):
    methods = ["grpo", "numca", "hista"]
    recs = _records(methods)
    s = summarise(recs, methods, n_boot=50)
    assert table1(s, _methods(methods)) is None and table1_markdown(None) == ""
    paths = write_report(s, recs, _methods(methods), tmp_path)
    assert "PPO critics" not in paths["markdown"].read_text(encoding="utf-8")
    assert json.loads(paths["json"].read_text(encoding="utf-8"))["table1"] is None


def test_table1_without_a_grpo_row_uses_the_recorded_group_mean_and_one_lambda():
    methods = ["ppo-n?lam=0.95", "hista"]
    s = summarise(_records(methods), methods, n_boot=50)
    t = table1(s, _methods(methods), _labels(methods))
    assert t["columns"] == ["λ = 0.95", "no λ"]
    assert [r["label"] for r in t["rows"]] == ["GRPO", "PPO-N"]
    assert t["rows"][0]["cells"]["no λ"]["method"] is None
    header, rows = _table_rows(table1_markdown(t), "Method")
    assert rows["GRPO"] == ["–", f"{s['grpo_mae']['all']:.3f}"]  # no interval for the recorded group mean
    assert rows["PPO-N"] == [_cell(s, "ppo-n?lam=0.95"), "–"]


def test_table4_names_ppo_rows_as_the_paper():
    s = summarise(_records(), PPO_METHODS, n_boot=50)
    _, rows = _table_rows(markdown_table(s, _labels()), "Estimator")
    assert list(rows) == ["GRPO", "Hista", "PPO-1 (λ=0.95)", "PPO-N (λ=0.95)", "PPO-1 (λ=1.0)", "Numca",
                          "PPO-N (λ=1.0)", "MCS@1", "MCS@2", "MCS@3"]
    # one λ per mode: no λ in the name; a label chosen in the spec stays
    methods = ["grpo", "ppo-n?lam=0.95", "numca", "hista", "ppo-1?lam=1.0&label=Critic 1"]
    offsets = dict(OFFSETS, **{"ppo-1?lam=1.0&label=Critic 1": OFFSETS["ppo-1"]})
    recs = [r.with_values({m: 0.5 + (offsets[m][i] or 0.0) for m in methods}) for i, r in enumerate(_records())]
    s = summarise(recs, methods, n_boot=50)
    _, rows = _table_rows(markdown_table(s, _labels(methods)), "Estimator")
    assert list(rows)[:5] == ["GRPO", "PPO-N", "Numca", "Hista", "Critic 1"]


def test_difference_stats_match_a_hand_computation():
    stats = difference_stats(_records(), _methods())
    # Figure 2's order first (PPO-1, PPO-N, Numca, Hista), the given order within and after
    assert list(stats) == ["ppo-1?lam=0.95", "ppo-1", "ppo-n?lam=0.95", "ppo-n?lam=1.0", "numca", "hista", "grpo"]
    # hista: +.25 +.25 -.25 0: mean 1/16; mean |d| 3/16; deviations 3/16 3/16 -5/16 -1/16
    assert stats["hista"] == {"n": 4, "mean": 0.0625, "mean_abs": 0.1875,
                              "std": pytest.approx(math.sqrt((9 + 9 + 25 + 1) / 256 / 4))}
    # numca: +.5 -.25 +.25 over three cases (one None)
    assert stats["numca"] == {"n": 3, "mean": pytest.approx(1 / 6), "mean_abs": pytest.approx(1 / 3),
                              "std": pytest.approx(math.sqrt(((1 / 3) ** 2 + (5 / 12) ** 2 + (1 / 12) ** 2) / 3))}
    assert stats["ppo-1"] == {"n": 4, "mean": 0.0, "mean_abs": 0.125, "std": 0.125}
    assert stats["grpo"] == {"n": 4, "mean": 0.0, "mean_abs": 0.0, "std": 0.0}
    # without a critic method the given order stays
    assert list(difference_stats(_records(["hista", "grpo", "numca"]), _methods(["hista", "grpo", "numca"]))) == [
        "hista", "grpo", "numca"]
    empty = difference_stats([], _methods(["hista"]))["hista"]
    assert empty["n"] == 0 and math.isnan(empty["std"]) and math.isnan(empty["mean_abs"])


def test_report_records_the_differences_and_draws_them_in_the_papers_order(tmp_path, monkeypatch):
    recs = _records()
    s = summarise(recs, PPO_METHODS, n_boot=50)
    figures = {}
    save = sveb_figures.save_figure

    def keep(fig, path):
        figures[path.name] = fig
        return save(fig, path)

    monkeypatch.setattr(sveb_figures, "save_figure", keep)
    paths = write_report(s, recs, _methods(), tmp_path)
    data = paths["differences_plot"].read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 5000
    panels = [ax for ax in figures["differences.png"].axes]
    assert [ax.get_title() for ax in panels] == ["PPO-1 (λ=0.95)", "PPO-1 (λ=1.0)", "PPO-N (λ=0.95)",
                                                 "PPO-N (λ=1.0)", "Numca", "Hista", "GRPO"]
    hista_text = "\n".join(t.get_text() for t in panels[5].texts)
    assert "std=0.207" in hista_text and "mean |Δ|=0.188" in hista_text and "n=4" in hista_text

    payload = json.loads(paths["json"].read_text(encoding="utf-8"))
    assert payload["differences"] == json.loads(json.dumps(difference_stats(recs, _methods())))
    assert payload["differences"]["numca"]["n"] == 3
    assert payload["labels"]["ppo-n?lam=0.95"] == "PPO-N (λ=0.95)"
    md = paths["markdown"].read_text(encoding="utf-8")
    _, rows = _table_rows(md.split("## Difference from GRPO")[1], "Estimator")
    assert rows["Hista"] == ["4", "+0.062", "0.207", "0.188"]
    assert list(rows)[:2] == ["PPO-1 (λ=0.95)", "PPO-1 (λ=1.0)"]


def test_captions_say_the_intervals_resample_problems_when_cases_share_them(tmp_path):
    """Two states of each of two problems: every caption with an interval says it resampled problems;
    one case per problem, or a results summary written before the key existed, says cases."""
    recs = [replace(r, case_id=f"p{i // 2}#s{i % 2}") for i, r in enumerate(_records())]
    s = summarise(recs, PPO_METHODS, n_boot=50)
    assert s["resampled"] == "problems"
    md = write_report(s, recs, _methods(), tmp_path / "shared")["markdown"].read_text("utf-8")
    phrase = "interval over problems (cases share problems) in brackets"
    # the MAE table, how to read it, the PPO table (Table 1 layout) and the paired table
    assert md.count(phrase) == 4 and "over cases" not in md
    assert md.splitlines()[2].startswith("Table: SVEB mean absolute error") and phrase in md.splitlines()[2]

    one_each = summarise(_records(), PPO_METHODS, n_boot=50)
    md = write_report(one_each, _records(), _methods(), tmp_path / "one")["markdown"].read_text(
        "utf-8")
    assert md.count("interval over cases in brackets") == 4 and "over problems" not in md
    old = {k: v for k, v in s.items() if k not in ("resampled", "n_problems")}
    assert "bootstrap interval over cases in brackets" in markdown_table(old)
    table = table1_markdown(table1(s, _methods()), resampled="problems")
    assert "interval over problems (cases share problems)" in table
