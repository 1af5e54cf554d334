"""``sveb sweep``, method labels, methods files and multi-layer hidden states (SPEC §8; issue 12):
grids parse strictly, every point's value equals ``sveb eval``'s, one forward pass per case
serves every layer, a killed sweep resumes to the same sweep.json, selection splits by problem."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from hista.cli import main
from hista.errors import InputError
from hista.sveb import cases as case_file
from hista.sveb import eval as sveb_eval
from hista.sveb import sweep as sveb_sweep
from hista.sveb.cases import split_problems
from hista.sveb.eval import evaluate
from hista.sveb.grid import grid_points, parse_grid
from hista.sveb.methods import build_method, format_method, parse_method, read_methods_file
from hista.sveb.rows import CaseRow, RowState
from hista.sveb.selection import select, selection_plan
from hista.sveb.sweep_outputs import markdown, ranked, summary_text, write_outputs

pytestmark = pytest.mark.xdist_group("sveb-sweep")  # its module fixtures are built once (tests/conftest.py)

DATA = Path(__file__).parents[1] / "data"
TINY = str(DATA / "sveb_cases_tiny.jsonl")
FINE = "min_distance=1e-4"  # the tiny model's hidden states are close: let distances matter
GRID = f"layer=-1,-2;interval=2,4;{FINE}"


@pytest.fixture(scope="module")
def cases_path(tmp_path_factory):
    """8 cases, 2 states of each of 4 problems, built from the tiny cases with mixed rewards
    (each problem's prompt its own: cases that share a prompt are one problem)."""
    templates = [json.loads(line) for line in open(TINY)]
    records = []
    for p in range(4):
        for s in range(2):
            record = json.loads(json.dumps(templates[p % 2]))
            problem = f"{record['problem']['id']}-p{p}"
            record["key"] = f"{problem}#s{s}"
            record["problem"]["id"] = problem
            record["prompt_ids"] = record["prompt_ids"] + [100 + p]
            for k, rollout in enumerate(record["rollouts"]):
                rollout["reward"] = float((k + p + s) % 2 or k == 3)
            record["state"] = {"rollout": (p + s) % 4, "t": 1 + (2 * p + s) % 5}
            record["continuations"] = [float((p + s + j) % 3 == 0) for j in range(3)]
            record["target"] = sum(record["continuations"]) / 3
            records.append(record)
    path = tmp_path_factory.mktemp("sweep") / "cases.jsonl"
    path.write_text("".join(case_file.dumps(r) for r in records))
    return path


@pytest.fixture
def forward_calls(monkeypatch):
    """Every call of the hidden-state forward pass in sveb eval, with its layers."""
    calls = []
    original = sveb_eval.hidden_states

    def spy(*args, **kw):
        calls.append(kw.get("layers"))
        return original(*args, **kw)

    monkeypatch.setattr(sveb_eval, "hidden_states", spy)
    return calls


def _sweep(cases_path, out, tiny, **kw):
    kw.setdefault("grid", GRID)
    return sveb_sweep.sweep(cases_path, out, lm=tiny, progress=False, n_boot=50, **kw)


# --- grids -----------------------------------------------------------------------------------


def test_grid_parsing_and_cartesian_product():
    grid = parse_grid("layer=-1,-4,-8; interval=10,25,50;stride=1,5;normalise=true,false;min_distance=1e-4")
    assert grid == {"layer": [-1, -4, -8], "interval": [10, 25, 50], "stride": [1, 5], "normalise": [True, False],
                    "min_distance": [1e-4]}
    points = grid_points("hista", grid)
    assert len(points) == 3 * 3 * 2 * 2 == len({s for s, _ in points})
    assert points[0] == ("hista?layer=-1&interval=10&stride=1&normalise=true&min_distance=0.0001",
                         {"layer": -1, "interval": 10, "stride": 1, "normalise": True, "min_distance": 1e-4})
    for spec, params in points:  # every point reads back as its parameters
        assert parse_method(spec) == ("hista", None, params, None)
    assert [s for s, _ in grid_points("numca?parser=digits", parse_grid("merge_tokens=0,50"))] == [
        "numca?parser=digits&merge_tokens=0", "numca?parser=digits&merge_tokens=50"]
    assert [s for s, _ in grid_points("hista-reference", parse_grid("stride=1,5"))] == [
        "hista-reference?stride=1", "hista-reference?stride=5"]
    assert build_method("hista-reference?stride=1").estimator.config.profile == "reference"


@pytest.mark.parametrize("base, grid, needle", [
    ("hista", "", "empty"),
    ("hista", "layer", "'layer' is not key=v1,v2"),
    ("hista", "layer=", "'layer=' is not key=v1,v2"),
    ("hista", "layer=-1;layer=-2", "key 'layer' is given twice"),
    ("hista", "layer=-1,-1", "key 'layer': the value '-1' is given twice"),
    ("hista", "layer=-1,,-2", "key 'layer': value 2 is not a scalar"),
    ("hista", ";", "empty"),
    ("hista", "layer=[-1", "key 'layer': cannot read"),
    ("hista", "label=a,b", "'label' is not a parameter"),
    ("hista", "nokey=1,2", "key 'nokey' is not a parameter of 'hista'"),
    ("hista?layer=-1", "layer=-2", "key 'layer' is already set by the base"),
    ("numca", "stride=1", "key 'stride' is not a parameter of 'numca'"),
])
def test_bad_grids_name_the_key(base, grid, needle):
    with pytest.raises(InputError) as err:
        grid_points(base, parse_grid(grid))
    assert err.value.field == "--grid" and needle in err.value.message


def test_bad_grid_values_name_the_point():
    """A value of the wrong type is refused by the point's estimator, naming the point and key."""
    with pytest.raises(InputError, match=r"method 'hista\?stride=abc': stride must be an integer"):
        grid_points("hista", parse_grid("stride=1,abc"))


# --- sweep values, forward passes, outputs ----------------------------------------------------


def test_sweep_values_equal_evaluate_with_one_forward_pass_per_problem(cases_path, tmp_path, tiny, forward_calls):
    # the paper's protocol (the state's own reward shown): the tiny model's layers give different values
    result = _sweep(cases_path, tmp_path / "s", tiny, protocol="paper")
    n = len(case_file.read(cases_path))
    # every layer of every point from one pass per group of rollouts (a problem's two states share it)
    assert forward_calls == [[-2, -1]] * (n // 2)
    specs = [p["spec"] for p in result["points"]]
    assert len(specs) == 4 and result["n_cases"] == n
    lines = (tmp_path / "s" / "values.jsonl").read_text().splitlines()
    assert len(lines) == 1 + n and json.loads(lines[0])["specs"] == specs
    chosen = [specs[0], specs[-1]]  # layer -1 and layer -2
    reference = evaluate(cases_path, chosen, lm=tiny, progress=False, n_boot=10, protocol="paper")
    stored = [json.loads(line) for line in lines[1:]]
    for row, ref in zip(stored, reference["cases"]):
        assert row["case_id"] == ref.case_id and row["length"] == ref.length == 6
        assert {m: row["values"][m] for m in chosen} == ref.values
    assert len({tuple(r["values"].values()) for r in stored}) > 1
    assert any(r["values"][chosen[0]] != r["values"][chosen[1]] for r in stored)  # the layers differ
    # per point: MAE and the paired comparison with GRPO (the group mean)
    rows = reference["cases"]
    for point, spec in ((result["points"][0], chosen[0]), (result["points"][-1], chosen[1])):
        errors = [abs(r.values[spec] - r.target) for r in rows]
        grpo = [abs(r.group_mean - r.target) for r in rows]
        assert point["mae"] == pytest.approx(sum(errors) / n)
        assert point["delta_mae"] == pytest.approx((sum(errors) - sum(grpo)) / n)
        assert point["delta_lo"] <= point["delta_mae"] <= point["delta_hi"]
        assert point["win_rate"] == sum(e < g - 1e-12 for e, g in zip(errors, grpo)) / n and point["n"] == n
        assert point["label"] == build_method(spec).label
    saved = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert saved["grid"] == {"layer": [-1, -2], "interval": [2, 4], "min_distance": [1e-4]}
    assert saved["methods"][chosen[1]]["config"]["layer"] == -2
    # one heatmap per pair of keys with 2+ values; the table is sorted by ΔMAE, best first
    assert sorted(p.name for p in (tmp_path / "s").glob("heatmap_*.png")) == ["heatmap_layer_interval.png"]
    md = (tmp_path / "s" / "sweep.md").read_text()
    deltas = [p["delta_mae"] for p in ranked(result["points"])]
    assert deltas == sorted(deltas) and "heatmap_layer_interval.png" in md and "| rank |" in md


def test_a_killed_sweep_resumes_to_the_same_result(cases_path, tmp_path, tiny, forward_calls):
    full = tmp_path / "full"
    _sweep(cases_path, full, tiny)
    expected = json.loads((full / "sweep.json").read_text())
    n = len(forward_calls)
    # killed after 3 cases, in the middle of writing the 4th line
    part = tmp_path / "part"
    part.mkdir()
    lines = (full / "values.jsonl").read_text().splitlines(keepends=True)
    (part / "values.jsonl").write_text("".join(lines[:4]) + lines[4][:40])
    forward_calls.clear()
    _sweep(cases_path, part, tiny)
    assert len(forward_calls) == n - 1  # only the missing cases: the second state of problem 2, problems 3 and 4
    assert json.loads((part / "sweep.json").read_text()) == expected
    assert (part / "values.jsonl").read_text() == (full / "values.jsonl").read_text()
    # killed while creating the file, before its header: starts afresh
    (part / "values.jsonl").write_text("")
    forward_calls.clear()
    _sweep(cases_path, part, tiny)
    assert len(forward_calls) == n and json.loads((part / "sweep.json").read_text()) == expected
    # a finished sweep reruns without a model and without a forward pass; another selection reuses the values
    forward_calls.clear()
    again = sveb_sweep.sweep(cases_path, part, grid=GRID, progress=False, n_boot=50, folds=2)
    assert forward_calls == [] and again["selection"]["mode"] == "folds"
    assert again["points"] == expected["points"]


def test_a_killed_probe_sweep_resumes_to_the_same_values(cases_path, tmp_path, tiny):
    """Cross-fitted points (the probe): a resumed sweep fits on every case again, so the cases
    it still scores get the values of an uninterrupted sweep."""
    grid = "ridge=1,100;offset=none,group_mean"
    full, part = tmp_path / "full", tmp_path / "part"
    result = _sweep(cases_path, full, tiny, base="probe", grid=grid)
    values = [json.loads(line) for line in (full / "values.jsonl").read_text().splitlines()[1:]]
    assert len({tuple(v["values"].values()) for v in values}) > 1 and result["n_cases"] == 8
    part.mkdir()
    lines = (full / "values.jsonl").read_text().splitlines(keepends=True)
    (part / "values.jsonl").write_text("".join(lines[:3]) + lines[3][:30])
    _sweep(cases_path, part, tiny, base="probe", grid=grid)
    assert (part / "values.jsonl").read_text() == (full / "values.jsonl").read_text()


def test_resume_refuses_values_of_another_sweep(cases_path, tmp_path, tiny):
    out = tmp_path / "s"
    _sweep(cases_path, out, tiny, grid="layer=-1,-2")
    before = (out / "values.jsonl").read_bytes()
    with pytest.raises(InputError) as err:
        _sweep(cases_path, out, tiny, grid="layer=-1,-2;interval=5")
    assert err.value.path == str(out / "values.jsonl") and "use another --out" in err.value.message
    assert "specs" in err.value.message and (out / "values.jsonl").read_bytes() == before
    other = tmp_path / "other.jsonl"  # the same sweep on other cases
    other.write_text("".join(case_file.dumps(dict(r, key=r["key"] + "x")) for r in case_file.read(cases_path)))
    with pytest.raises(InputError, match="is not in the cases file: use another --out"):
        _sweep(other, out, tiny, grid="layer=-1,-2")


# --- selection ---------------------------------------------------------------------------------


def test_selection_is_by_problem_and_disjoint(cases_path, tmp_path, tiny):
    problems = sorted({r["key"].partition("#")[0] for r in case_file.read(cases_path)})
    assert len(problems) == 4
    for seed in range(5):
        chosen, report = split_problems(problems, 0.5, seed)
        assert not set(chosen) & set(report) and sorted(chosen + report) == problems and len(chosen) == 2
    assert split_problems(problems, 0.5, 1) == split_problems(problems, 0.5, 1)
    assert len(split_problems(problems, 0.01, 0)[0]) == 1 and len(split_problems(problems, 0.99, 0)[1]) == 1

    result = _sweep(cases_path, tmp_path / "split", tiny, select_on=0.5, seed=3)
    sel = result["selection"]
    assert sel["mode"] == "split" and not set(sel["selection_problems"]) & set(sel["report_problems"])
    assert sorted(sel["selection_problems"] + sel["report_problems"]) == problems
    assert sel["picked"] in {p["spec"] for p in result["points"]} and sel["reported"]["n"] == 4
    assert sel["selection_cases"] == 4  # both states of a problem stay on its side

    result = _sweep(cases_path, tmp_path / "folds", tiny, folds=4)
    folds = result["selection"]["folds"]
    assert [len(f["problems"]) for f in folds] == [1, 1, 1, 1]
    assert sorted(p for f in folds for p in f["problems"]) == problems
    assert all(f["cases"] == 2 and f["picked"] for f in folds)
    assert result["selection"]["reported"]["n"] == 8  # every case held out once


def _rows(states):
    """Eight hand-made sweep rows: ``states`` states per problem, points "a" (close to the target)
    and "b" (the group mean)."""
    return [CaseRow(case_id=f"p{k // states}#s{k % states}", field="math", target=(k % 4) / 4, group_mean=0.5,
                    continuations=(), values={"a": (k % 4) / 4 + (0.25 if k % 3 else 0.0), "b": 0.5})
            for k in range(8)]


def test_sweep_intervals_resample_problems_when_cases_share_them(tmp_path):
    from hista.sveb.metrics import bootstrap_ci

    points, labels = [("a", None), ("b", None)], {"a": "A", "b": "B"}
    rows = _rows(2)
    summary = sveb_sweep.summarise(rows, points, labels, n_boot=300, seed=1)
    assert summary["resampled"] == "problems"
    diffs = [abs(r.values["a"] - r.target) - abs(r.group_mean - r.target) for r in rows]
    a = summary["points"][0]
    by_problem = bootstrap_ci(diffs, n_boot=300, seed=1, clusters=[f"p{k // 2}" for k in range(8)])
    assert (a["delta_lo"], a["delta_hi"]) == by_problem != bootstrap_ci(diffs, n_boot=300, seed=1)
    plan = selection_plan([f"p{k}" for k in range(4)], folds=2, select_on=None, seed=0)
    selection = select(rows, ["a", "b"], labels, plan, n_boot=300, seed=1)
    assert selection["reported"]["resampled"] == "problems"
    result = {"cases_file": "c.jsonl", "grid": None, "base": None, **summary, "selection": selection}
    phrase = "over problems (cases share problems)"
    assert f"paired bootstrap 95% interval (300 resamples, seed 1) {phrase};" in markdown(result)
    assert f"[95% interval {phrase}]" in summary_text(result)
    paths = write_outputs(result, tmp_path)
    assert json.loads(paths["sweep.json"].read_text())["resampled"] == "problems"

    one_each = sveb_sweep.summarise(_rows(1), points, labels, n_boot=300, seed=1)
    a = one_each["points"][0]
    assert one_each["resampled"] == "cases"
    assert (a["delta_lo"], a["delta_hi"]) == bootstrap_ci(diffs, n_boot=300, seed=1)  # the same diffs, per case
    result = {**result, **one_each}
    assert "(300 resamples, seed 1) over cases;" in markdown(result)
    del result["resampled"]  # a sweep.json written before the key existed
    assert "[95% interval over cases]" in summary_text(result)


@pytest.mark.parametrize("kw, field", [
    ({"folds": 5}, "--folds"), ({"folds": 1}, "--folds"), ({"select_on": 1.0}, "--select-on"),
    ({"select_on": 0.0}, "--select-on"), ({"folds": 2, "select_on": 0.5}, "--folds"),
])
def test_bad_selection_settings(kw, field):
    with pytest.raises(InputError) as err:
        selection_plan(["a", "b", "c", "d"], seed=0, **{"folds": None, "select_on": None, **kw})
    assert err.value.field == field
    with pytest.raises(InputError, match="needs at least 2"):
        selection_plan(["a"], folds=None, select_on=0.5, seed=0)
    assert selection_plan(["a"], folds=None, select_on=None, seed=0)["mode"] == "none"


# --- CLI ---------------------------------------------------------------------------------------


def test_cli_sweep(cases_path, tmp_path, capsys):
    out = tmp_path / "s"
    assert main(["sveb", "sweep", "--cases", str(cases_path), "--grid", "stride=1,2", "--base", f"hista?{FINE}",
                 "--out", str(out), "--folds", "2", "--n-boot", "20"]) == 0
    printed = capsys.readouterr().out
    assert "2 points on 8 cases" in printed and "2-fold by problem" in printed and str(out / "sweep.json") in printed
    assert "[95% interval over problems (cases share problems)]" in printed  # 2 states per problem
    assert json.loads((out / "sweep.json").read_text())["base"] == f"hista?{FINE}"


@pytest.mark.parametrize("extra, needle", [
    (["--grid", "layer"], "--grid"),
    (["--grid", "nokey=1,2"], "nokey"),
    (["--grid", "layer=-1", "--folds", "3"], "--folds"),
    (["--grid", "layer=-1", "--select-on", "1"], "--select-on"),
    (["--grid", "layer=-1", "--folds", "1"], "--folds"),
    (["--grid", "layer=-1", "--specs", "m.yaml"], "--specs"),
    (["--grid", "layer=-1", "--base", "nosuch"], "nosuch"),
    (["--grid", "layer=-1", "--base", "hista?label=x"], "--base"),
    (["--specs", "missing.yaml"], "missing.yaml"),
    ([], "--grid"),
])
def test_cli_sweep_bad_input_exits_2(tmp_path, capsys, monkeypatch, extra, needle):
    monkeypatch.chdir(tmp_path)
    shutil.copy(TINY, "cases.jsonl")
    try:
        code = main(["sveb", "sweep", "--cases", "cases.jsonl", "--out", "s", *extra])
    except SystemExit as exc:  # argparse: usage errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and needle in err and "Traceback" not in err
    assert not (tmp_path / "s").exists()


# --- labels, methods files, parameter types --------------------------------------------------


def test_label_names_the_method_and_is_not_a_parameter(tmp_path, tiny):
    methods = ["grpo", "hista?layer=-2&label=Hista L-2", "mc?num=1&label=MC 1"]
    results = evaluate(TINY, methods, lm=tiny, progress=False, n_boot=10)
    assert results["labels"] == {"grpo": build_method("grpo").label, methods[1]: "Hista L-2",
                                 methods[2]: "MC 1"}
    assert results["methods"][methods[1]]["config"]["layer"] == -2 and "label" not in results["methods"][methods[1]]
    assert parse_method(methods[1]) == ("hista", None, {"layer": -2}, "Hista L-2")
    assert all(r.length == 6 for r in results["cases"])
    out = tmp_path / "results.json"
    from hista.jsonio import write_json_atomic
    from hista.sveb import results as results_file

    write_json_atomic(out, results)
    assert results_file.read(out)["labels"][methods[2]] == "MC 1"


@pytest.mark.parametrize("methods, needle", [
    ("hista?label=", "'label' must not be empty"),
    ("hista?layer=-1&layer=-2", "'layer' is set twice"),
    ("grpo?label=X,hista?label=X", "have the same label 'X'"),
    ("hista?nokey=1", "unknown parameter(s) nokey"),
    ("hista?stride=abc", "stride must be an integer, got 'abc'"),
    ("hista?layer=abc", "layer must be an integer"),
    ("hista?layer=1.5", "layer must be an integer"),
    ("hista?include_self=3", "include_self must be true or false"),
    ("hista?alpha=false", "alpha must be a number"),
    ("mc?num=x", "num must be an integer"),
    ("numca?parser=5", "parser must be a string"),
])
def test_bad_method_keys_and_values_exit_2_naming_method_and_key(tmp_path, capsys, methods, needle):
    out = tmp_path / "r.json"
    assert main(["sveb", "eval", "--cases", TINY, "--methods", methods, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert needle in err and "'" + methods.split(',')[-1] + "'" in err and not out.exists()


def test_exponent_values_are_numbers():
    assert parse_method("hista?min_distance=1e-4")[2] == {"min_distance": 1e-4}
    assert build_method("hista?min_distance=2E3").estimator.config.min_distance == 2000.0
    assert format_method("hista", None, {"min_distance": 1e-5}) == "hista?min_distance=1.0e-05"


def test_methods_file(tmp_path, capsys):
    path = tmp_path / "methods.yaml"
    path.write_text("- grpo\n- hista?layer=-2&label=Deep\n"
                    "- {name: hista, profile: reference, label: Ref, params: {stride: 1, min_distance: 1.0e-4}}\n"
                    "- name: numca\n  params: {parser: digits}\n")
    specs = read_methods_file(path)
    assert specs == ["grpo", "hista?layer=-2&label=Deep", "hista-reference?stride=1&min_distance=0.0001&label=Ref",
                     "numca?parser=digits"]
    out = tmp_path / "r.json"
    assert main(["sveb", "eval", "--cases", TINY, "--methods-file", str(path), "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert list(data["methods"]) == specs and data["labels"][specs[2]] == "Ref"
    assert data["methods"][specs[2]]["config"]["profile"] == "reference"


@pytest.mark.parametrize("text, field, needle", [
    ("grpo\n", None, "non-empty YAML list"),
    ("[]\n", None, "non-empty YAML list"),
    ("- grpo\n- [1, 2]\n", "methods[1]", "a spec string or a mapping"),
    ("- grpo\n- {name: hista, color: red}\n", "methods[1]", "unknown key(s) color"),
    ("- {params: {}}\n", "methods[0]", "'name'"),
    ("- {name: hista, params: [1]}\n", "methods[0]", "'params' must be a mapping"),
    ("- {name: hista, params: {layer: [1, 2]}}\n", "methods[0]", "parameter 'layer'"),
    ("- {name: hista, params: {parser: 'a&b'}}\n", "methods[0]", "cannot write"),
    ("- grpo\n- ''\n", "methods[1]", "empty"),
    ("- grpo\n- grpo\n", "methods[1]", "already methods[0]"),
    ("- grpo\n- hista?layer\n", "methods[1]", "is not key=value"),
    ("- [\n", None, "bad YAML"),
])
def test_bad_methods_files_name_the_file_and_entry(tmp_path, capsys, text, field, needle):
    path = tmp_path / "methods.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        read_methods_file(path)
    assert err.value.path == str(path) and err.value.field == field and needle in err.value.message
    out = tmp_path / "r.json"
    assert main(["sveb", "eval", "--cases", TINY, "--methods-file", str(path), "--out", str(out)]) == 2
    assert "methods.yaml" in capsys.readouterr().err and not out.exists()


def test_methods_and_methods_file_exclude_each_other(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["sveb", "eval", "--cases", TINY, "--methods", "grpo", "--methods-file", "m.yaml", "--out", "r.json"])
    assert exc.value.code == 2 and "--methods-file" in capsys.readouterr().err


# --- multi-layer hidden states and the results file --------------------------------------------


def test_several_layers_from_one_pass_equal_single_layer_calls(tiny):
    from hista.models import hidden_states

    prompts = [[1, 2, 3, 4], [5, 6], [1, 2, 3, 4]]
    completions = [[7, 8, 9], [10, 11, 12, 13, 14], []]
    many = hidden_states(tiny, prompts, completions, layers=[-1, 0, 2, -2], batch_size=2)
    assert list(many) == [-1, 0, 2, -2] and many[-1] is many[2]  # -1 and 2 name one layer of 3
    for layer, tensors in many.items():
        for a, b in zip(tensors, hidden_states(tiny, prompts, completions, layer=layer, batch_size=2)):
            torch.testing.assert_close(a, b, atol=0, rtol=0)
    with pytest.raises(IndexError, match="layer 3 does not exist"):
        hidden_states(tiny, prompts, completions, layers=[-1, 3])


@pytest.mark.parametrize("length, ok", [(6, True), (0, True), (-1, False), (True, False), (1.5, False), ("6", False)])
def test_results_rows_may_record_a_length(tmp_path, length, ok):
    from hista.sveb import results as results_file

    data = json.loads((DATA / "sveb_results_tiny.json").read_text())
    data["cases"][1]["length"] = length
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    if ok:
        assert results_file.read(path)["cases"][1].length == length
    else:
        with pytest.raises(InputError) as err:
            results_file.read(path)
        assert err.value.field == "cases[1].length"


@pytest.mark.parametrize("field, value", [("state", {"rollout": -1, "t": 2}), ("state", [0, 2]),
                                          ("structure", ["interval"])])
def test_results_rows_state_and_structure_are_checked(tmp_path, field, value):
    """A row's optional state ({rollout, t}, non-negative integers) and structure (an object) are
    read into a typed row only when they have that shape; otherwise the file and field are named."""
    from hista.sveb import results as results_file

    data = json.loads((DATA / "sveb_results_tiny.json").read_text())
    path = tmp_path / "results.json"
    data["cases"][1]["state"] = {"rollout": 3, "t": 0}
    path.write_text(json.dumps(data))
    assert results_file.read(path)["cases"][1].state == RowState(rollout=3, t=0)
    data["cases"][1][field] = value
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as err:
        results_file.read(path)
    assert err.value.field == f"cases[1].{field}" and err.value.path == str(path)


@pytest.mark.parametrize("field, value", [("field", None), ("continuations", []), ("continuations", [2.0]),
                                          ("state", {"rollout": 0})])
def test_resume_refuses_a_values_row_that_is_not_a_case_row(cases_path, tmp_path, tiny, field, value):
    """A values file whose row lacks what a case row holds stops the resume at that line and field."""
    out = tmp_path / "s"
    _sweep(cases_path, out, tiny, grid="layer=-1,-2")
    lines = (out / "values.jsonl").read_text().splitlines(keepends=True)
    row = json.loads(lines[2])
    row[field] = value
    (out / "values.jsonl").write_text("".join(lines[:2]) + json.dumps(row) + "\n")
    before = (out / "values.jsonl").read_bytes()
    with pytest.raises(InputError) as err:
        _sweep(cases_path, out, tiny, grid="layer=-1,-2")
    assert (err.value.path, err.value.line, err.value.field) == (str(out / "values.jsonl"), 3, field)
    assert (out / "values.jsonl").read_bytes() == before


def test_split_writes_the_sweeps_selection_and_report_parts(tmp_path):
    """sveb split puts whole problems on one side, exactly as sweep's default split does."""
    records = [r for r in case_file.read(TINY) if r["kind"] == "case"]
    many = tmp_path / "many.jsonl"  # six problems, two states each, each with its own prompt
    many.write_text("".join(case_file.dumps({**records[k % len(records)], "key": f"p{k // 2}#s{k % 2}",
                                             "prompt_ids": records[k % len(records)]["prompt_ids"] + [100 + k // 2]})
                            for k in range(12)))
    assert main(["sveb", "split", "--cases", str(many), "--out", str(tmp_path / "split"), "--seed", "3"]) == 0
    parts = {p: [r["key"] for r in case_file.read(tmp_path / "split" / f"{p}.jsonl")] for p in ("selection", "report")}
    plan = selection_plan([f"p{k}" for k in range(6)], folds=None, select_on=None, seed=3)
    for part, keys in parts.items():
        assert sorted({k.split("#")[0] for k in keys}) == plan[part]
        assert len(keys) == 2 * len(plan[part])
    assert sorted(parts["selection"] + parts["report"]) == sorted(f"p{k // 2}#s{k % 2}" for k in range(12))


def test_split_keeps_a_question_drawn_twice_on_one_side(tmp_path):
    """Two problem ids with one prompt (a task drew the question twice) are one problem: sveb
    split never puts one in the selection part and the other in the report part."""
    records = [r for r in case_file.read(TINY) if r["kind"] == "case"]
    many = tmp_path / "many.jsonl"  # p0..p7, each its own prompt except p7, which asks p0's question
    many.write_text("".join(case_file.dumps({**records[0], "key": f"p{k}#s0",
                                             "prompt_ids": records[0]["prompt_ids"] + [100 + k % 7]})
                            for k in range(8)))
    for seed in range(6):
        out = tmp_path / f"split-{seed}"
        assert main(["sveb", "split", "--cases", str(many), "--out", str(out), "--seed", str(seed)]) == 0
        parts = {p: {r["key"] for r in case_file.read(out / f"{p}.jsonl")} for p in ("selection", "report")}
        side = next(p for p, keys in parts.items() if "p0#s0" in keys)
        assert "p7#s0" in parts[side] and sum(map(len, parts.values())) == 8
