"""SVEB rank metrics (hista.sveb.ranks; docs/sveb.md "Rank metrics"): Spearman ρ, within-problem ρ
and the AUROC of a continuation's success, checked against brute-force definitions."""

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest

from hista.sveb import ranks
from hista.sveb.report import write_report
from hista.sveb.rows import CaseRow
from hista.sveb.sweep import summarise as sweep_summarise


def _records(seed: int = 0, problems: int = 6, states: int = 4, m: int = 8) -> list[CaseRow]:
    """Cases of ``problems`` problems with ``states`` states each: binary continuations around a
    latent value, a good and a noisy estimate, and the group mean per problem."""
    rng = np.random.default_rng(seed)
    out = []
    for p in range(problems):
        mean = float(rng.uniform(0.1, 0.9))
        for s in range(states):
            latent = float(np.clip(mean + rng.normal(0, 0.25), 0, 1))
            conts = [float(x) for x in rng.random(m) < latent]
            out.append(CaseRow(case_id=f"p{p}#s{s}", field="f", target=sum(conts) / m, group_mean=mean,
                               continuations=tuple(conts),
                               values={"good": latent, "noisy": float(np.clip(latent + rng.normal(0, 0.3), 0, 1)),
                                       "tied": round(latent, 1)}))
    return out


def _brute_spearman(x, y):
    def avg_ranks(v):
        return [sum(1 for w in v if w < a) + (sum(1 for w in v if w == a) + 1) / 2 for a in v]

    rx, ry = np.asarray(avg_ranks(x)), np.asarray(avg_ranks(y))
    return float(np.corrcoef(rx, ry)[0, 1])


def _brute_auroc(scores, conts):
    wins = [s for s, c in zip(scores, conts) for r in c if r == 1]
    losses = [s for s, c in zip(scores, conts) for r in c if r == 0]
    total = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in itertools.product(wins, losses))
    return total / (len(wins) * len(losses))


def test_spearman_and_auroc_equal_their_definitions_with_ties():
    recs = _records(1)
    for method in ("good", "noisy", "tied"):
        values = [r.values[method] for r in recs]
        targets = [r.target for r in recs]
        assert ranks.spearman(values, targets) == pytest.approx(_brute_spearman(values, targets), abs=1e-12)
        row = ranks.rows_of(recs, [method], mcs=())[method]
        assert ranks.auroc(row.values, row.wins, row.losses) == pytest.approx(
            _brute_auroc(values, [r.continuations for r in recs]), abs=1e-12)
    assert math.isnan(ranks.spearman([1, 1, 1], [0, 1, 2])) and math.isnan(ranks.auroc([0.5], [3], [0]))


def test_a_summary_pairs_with_grpo_scores_mcs_on_other_continuations_and_averages_problems():
    recs = _records(2)
    out = ranks.rank_summary(recs, ["good", "noisy"], mcs=(1, 2), n_boot=200, seed=3)
    assert out["order"] == ["GRPO", "good", "noisy", "MCS@1", "MCS@2"] and out["resampled"] == "problems"
    rows = out["rows"]
    assert "delta" not in rows["GRPO"] and "delta" not in rows["MCS@1"]
    for name in ("good", "noisy"):
        for stat in ("rho", "auroc"):
            cell, delta = rows[name][stat], rows[name]["delta"][stat]
            assert delta["value"] == pytest.approx(cell["value"] - rows["GRPO"][stat]["value"])
            assert cell["lo"] <= cell["value"] <= cell["hi"] and delta["lo"] <= delta["hi"]
    assert rows["good"]["delta"]["rho"]["value"] > 0.05  # the latent value ranks states better than the group mean
    first = [r.continuations[0] for r in recs]
    rest = [r.continuations[1:] for r in recs]
    assert rows["MCS@1"]["rho"]["value"] == pytest.approx(_brute_spearman(first, [sum(c) / 7 for c in rest]))
    assert rows["MCS@1"]["auroc"]["value"] == pytest.approx(_brute_auroc(first, rest))
    per_problem = [_brute_spearman([r.values["good"] for r in recs[k:k + 4]], [r.target for r in recs[k:k + 4]])
                   for k in range(0, len(recs), 4)]
    per_problem = [x for x in per_problem if math.isfinite(x)]
    assert rows["good"]["rho_within"]["value"] == pytest.approx(sum(per_problem) / len(per_problem))
    assert math.isnan(rows["GRPO"]["rho_within"]["value"])  # the group mean is constant within a problem
    assert ranks.rank_summary(recs, ["good", "noisy"], mcs=(1, 2), n_boot=200, seed=3) == out  # deterministic
    with_grpo = ranks.rank_summary([replace(r, values={**r.values, "grpo": r.group_mean}) for r in recs],
                                   ["grpo", "good"], mcs=(), n_boot=50)
    assert with_grpo["order"] == ["grpo", "good"] and "delta" in with_grpo["rows"]["good"]


def test_the_report_and_the_sweep_show_the_rank_metrics(tmp_path):
    from hista.sveb.methods import build_methods
    from hista.sveb.metrics import summarise

    recs = [replace(r, values={"grpo": r.group_mean, "numca": r.values["good"]}) for r in _records(4)]
    methods = build_methods(["grpo", "numca"])
    paths = write_report(summarise(recs, list(methods), n_boot=50), recs, methods, tmp_path)
    md = paths["markdown"].read_text(encoding="utf-8")
    section = md.split("## Rank metrics")[1].split("## ")[0]
    assert "| Numca | 24 |" in section and "| MCS@1 | 24 |" in section and "*" in section
    points = sweep_summarise(recs, [("numca", None), ("grpo", None)], {"numca": "Numca", "grpo": "GRPO"}, n_boot=20)
    numca = points["points"][0]
    assert numca["rho"] == pytest.approx(ranks.spearman([r.values["numca"] for r in recs],
                                                        [r.target for r in recs]))
    assert 0.5 < numca["auroc"] <= 1 and points["points"][1]["rho"] < numca["rho"]
    constant = sweep_summarise([replace(r, group_mean=0.5, values={"grpo": 0.5}) for r in recs], [("grpo", None)],
                               {"grpo": "GRPO"}, n_boot=20)
    assert constant["points"][0]["rho"] is None  # a constant estimate has no ρ
