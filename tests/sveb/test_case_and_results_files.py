"""SVEB case and results files (SPEC §8) are checked against their schema on read: a bad file
raises an InputError naming file:line and the field, never another exception and never a
silent wrong result."""

from __future__ import annotations

import copy
import json
import math
import os
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hista.errors import InputError
from hista.jsonio import cut_unterminated, jsonable
from hista.sveb import cases, metrics, results
from hista.sveb.report import report_file
from hista.sveb.rows import CaseRow

pytestmark = pytest.mark.xdist_group("sveb-files")  # its module fixtures are built once (tests/conftest.py)

DELETE = object()
INF = "__INF__"  # a JSON number that parses to infinity (1e400), spliced in after dumping


def case_record(key: str = "p0#s0", field: str = "number") -> dict:
    """A valid case laid out like ``sveb build`` writes it (hista.sveb.build)."""
    return {
        "kind": "case", "key": key, "settings": {"model": "tiny", "revision": "tiny-r0", "seed": 0},
        "hista_version": "0.1.0", "problem": {"id": key.split("#")[0], "problem": "1 + 1?", "answer": "2",
                                              "verifier": "math", "field": field},
        "field": field, "prompt_text": "1 + 1?", "prompt_ids": [1, 2, 3],
        "rollouts": [
            {"completion_ids": [5, 6, 7], "completion_text": "ab cd", "offsets": [[0, 2], [2, 3], [3, 5]],
             "reward": 1.0},
            {"completion_ids": [8, 9], "completion_text": "xy", "offsets": [[0, 1], [1, 2]], "reward": 0},
        ],
        "accuracy": 0.5, "state": {"rollout": 0, "t": 2}, "continuations": [1.0, 0.0, 1.0, 1], "target": 0.75,
    }


def skip_record(key: str = "p9") -> dict:
    return {"kind": "skip", "key": key, "settings": {"model": "tiny", "revision": "tiny-r0", "seed": 0},
            "accuracy": 1.0, "reason": "accuracy out of range"}


def _steps(path: str) -> list:
    return [int(p) if p.isdigit() else p for p in path.replace("[", ".").replace("]", "").split(".") if p]


def mutate(obj, path: str, value):
    """``obj`` with the value at a dotted / indexed path replaced (or deleted with DELETE)."""
    obj = copy.deepcopy(obj)
    *parents, last = _steps(path)
    target = obj
    for step in parents:
        target = target[step]
    if value is DELETE:
        del target[last]
    else:
        target[last] = value
    return obj


def dump(record) -> str:
    return json.dumps(record).replace(f'"{INF}"', "1e400") + "\n"


def write_cases(tmp_path: Path, third) -> Path:
    """A case file: a skip record, a valid case, then ``third`` (a record or a raw line)."""
    path = tmp_path / "cases.jsonl"
    line = third if isinstance(third, (str, bytes)) else dump(third)
    data = (dump(skip_record()) + dump(case_record("p1#s0"))).encode()
    path.write_bytes(data + (line.encode() if isinstance(line, str) else line))
    return path


# --------------------------------------------------------------------------------------------
# case files
# --------------------------------------------------------------------------------------------


def test_valid_case_file_reads():
    with tempfile.TemporaryDirectory() as tmp:
        path = write_cases(Path(tmp), case_record())
        records = cases.read(path)
    assert [r["key"] for r in records] == ["p9", "p1#s0", "p0#s0"]
    assert records[2] == case_record()


CASE_MUTATIONS = [
    ("kind", DELETE, "kind"), ("kind", "cases", "kind"), ("kind", None, "kind"),
    ("key", DELETE, "key"), ("key", "", "key"), ("key", 3, "key"),
    ("settings", DELETE, "settings"), ("settings", [], "settings"),
    ("settings.model", DELETE, "settings.model"), ("settings.revision", 1, "settings.revision"),
    ("problem", DELETE, "problem"), ("problem", "x", "problem"),
    ("field", DELETE, "field"), ("field", "", "field"), ("field", 7, "field"), ("field", "all", "field"),
    ("prompt_ids", DELETE, "prompt_ids"), ("prompt_ids", "1,2", "prompt_ids"), ("prompt_ids", [], "prompt_ids"),
    ("prompt_ids[1]", -1, "prompt_ids[1]"), ("prompt_ids[1]", True, "prompt_ids[1]"),
    ("prompt_ids[1]", 2.0, "prompt_ids[1]"), ("prompt_ids[2]", 2**40, "prompt_ids[2]"),
    ("rollouts", DELETE, "rollouts"), ("rollouts", {}, "rollouts"), ("rollouts", [], "rollouts"),
    ("rollouts[1]", "x", "rollouts[1]"),
    ("rollouts[1].completion_ids", DELETE, "rollouts[1].completion_ids"),
    ("rollouts[1].completion_ids", None, "rollouts[1].completion_ids"),
    ("rollouts[1].completion_ids[1]", "9", "rollouts[1].completion_ids[1]"),
    ("rollouts[1].completion_ids[0]", False, "rollouts[1].completion_ids[0]"),
    ("rollouts[1].completion_text", DELETE, "rollouts[1].completion_text"),
    ("rollouts[1].completion_text", 5, "rollouts[1].completion_text"),
    ("rollouts[0].offsets", DELETE, "rollouts[0].offsets"),
    ("rollouts[0].offsets", [[0, 2], [2, 3]], "rollouts[0].offsets"),
    ("rollouts[0].offsets[2]", [3], "rollouts[0].offsets[2]"),
    ("rollouts[0].offsets[2]", [3, 6], "rollouts[0].offsets[2]"),
    ("rollouts[0].offsets[2]", [4, 3], "rollouts[0].offsets[2]"),
    ("rollouts[0].offsets[0]", [-1, 2], "rollouts[0].offsets[0]"),
    ("rollouts[0].offsets[1]", [2.0, 3], "rollouts[0].offsets[1]"),
    ("rollouts[0].offsets[1]", [True, 3], "rollouts[0].offsets[1]"),
    ("rollouts[0].offsets[1]", "2,3", "rollouts[0].offsets[1]"),
    ("rollouts[0].reward", DELETE, "rollouts[0].reward"), ("rollouts[0].reward", 1.5, "rollouts[0].reward"),
    ("rollouts[0].reward", -0.1, "rollouts[0].reward"), ("rollouts[0].reward", True, "rollouts[0].reward"),
    ("rollouts[0].reward", "1", "rollouts[0].reward"), ("rollouts[0].reward", INF, "rollouts[0].reward"),
    ("state", DELETE, "state"), ("state", [0, 2], "state"),
    ("state.rollout", DELETE, "state.rollout"), ("state.rollout", 2, "state.rollout"),
    ("state.rollout", -1, "state.rollout"), ("state.rollout", True, "state.rollout"),
    ("state.rollout", 0.0, "state.rollout"),
    ("state.t", DELETE, "state.t"), ("state.t", 4, "state.t"), ("state.t", -1, "state.t"),
    ("state.t", True, "state.t"), ("state.t", "1", "state.t"),
    ("continuations", DELETE, "continuations"), ("continuations", [], "continuations"),
    ("continuations", 0.75, "continuations"),
    ("continuations[1]", "0", "continuations[1]"), ("continuations[1]", True, "continuations[1]"),
    ("continuations[1]", 2, "continuations[1]"), ("continuations[1]", None, "continuations[1]"),
    ("continuations[3]", INF, "continuations[3]"),
    ("target", DELETE, "target"), ("target", "0.75", "target"), ("target", True, "target"),
    ("target", 1.5, "target"), ("target", INF, "target"), ("target", 0.7, "target"),
    ("key", "p1#s0", "key"),  # the key of line 2
]


@pytest.mark.parametrize("where, value, field", CASE_MUTATIONS, ids=[f"{w}={v!r}" if v is not DELETE else f"{w}-"
                                                                     for w, v, _ in CASE_MUTATIONS])
def test_case_mutations_name_line_and_field(tmp_path, where, value, field):
    path = write_cases(tmp_path, mutate(case_record(), where, value))
    with pytest.raises(InputError) as info:
        cases.read(path)
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), 3, field), str(err)
    assert f"{path}:3:" in str(err) and f"field '{field}'" in str(err)


def test_case_messages_show_both_numbers(tmp_path):
    with pytest.raises(InputError, match=r"0\.7 is not the mean of the continuation rewards \(0\.75\)"):
        cases.read(write_cases(tmp_path, mutate(case_record(), "target", 0.7)))
    with pytest.raises(InputError, match="already used on line 2"):
        cases.read(write_cases(tmp_path, mutate(case_record(), "key", "p1#s0")))
    with pytest.raises(InputError, match="already used on line 1"):
        cases.read(write_cases(tmp_path, skip_record("p9")))


@pytest.mark.parametrize("where, value, field", [
    ("settings", DELETE, "settings"), ("settings", "x", "settings"), ("key", DELETE, "key"), ("key", "", "key"),
    ("kind", "Skip", "kind"),
])
def test_skip_mutations(tmp_path, where, value, field):
    with pytest.raises(InputError) as info:
        cases.read(write_cases(tmp_path, mutate(skip_record("p8"), where, value)))
    assert (info.value.line, info.value.field) == (3, field)


@pytest.mark.parametrize("line, needle", [
    (b'{"kind": "case", "key": "\xff"}\n', "not UTF-8"),
    (b"\xef\xbb\xbf" + dump(case_record()).encode(), "bad JSON"),  # a byte order mark
    (dump(case_record()).replace("0.75", "NaN").encode(), "NaN"),
    (dump(case_record()).replace("0.75", "Infinity").encode(), "Infinity"),
    (dump(case_record()).replace('"p0#s0"', '"\\ud800"').encode(), "surrogate"),
    (b"[" * 100_000 + b"\n", "nested too deeply"),
    (b"[1, 2]\n", "expected a JSON object, got list"),
    (b"null\n", "expected a JSON object, got null"),
    (b"\n", "empty line"),
    (b"   \n", "empty line"),
    (dump(case_record()).encode()[:-1], "truncated last line"),
    (dump(case_record()).encode()[:40] + b"\n", "bad JSON"),
])
def test_bad_lines_name_the_line(tmp_path, line, needle):
    path = write_cases(tmp_path, line)
    with pytest.raises(InputError) as info:
        cases.read(path)
    assert f"{path}:3:" in str(info.value) and needle in str(info.value)


def test_repair_cuts_an_unterminated_last_line(tmp_path):
    path = write_cases(tmp_path, dump(case_record())[:30])
    with pytest.raises(InputError, match="truncated"):
        cases.read(path)
    before = path.read_bytes()
    assert [r["key"] for r in cases.read(path, partial=True)] == ["p9", "p1#s0"]
    assert path.read_bytes() == before  # reading never cuts: only repair does, once the caller checked all
    cut_unterminated(path)
    assert path.read_bytes().endswith(b"\n") and cases.read(path) == cases.read(path, partial=True)


def test_a_file_that_is_not_a_case_file_is_neither_read_nor_cut(tmp_path):
    """Issue 29: an unterminated last line that is not a JSON record means the file is not one
    this command wrote (notes, a one-line text): refused whole, and repair cuts nothing."""
    for text in (b"my notes\nline two", b"hello"):
        path = tmp_path / "notes.txt"
        path.write_bytes(text)
        with pytest.raises(InputError, match="not a case file"):
            cases.read(path, partial=True)
        with pytest.raises(InputError):
            cut_unterminated(path)
        assert path.read_bytes() == text


def test_missing_directory_and_fifo(tmp_path):
    assert cases.read(tmp_path / "none.jsonl") == []
    with pytest.raises(InputError, match="not a regular file"):
        cases.read(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    outcome = []

    def attempt():
        try:
            cases.read(fifo)
        except InputError as exc:
            outcome.append(str(exc))

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive() and outcome and "not a regular file" in outcome[0]


# --------------------------------------------------------------------------------------------
# results files
# --------------------------------------------------------------------------------------------


def results_object() -> dict:
    """A valid results object laid out like ``sveb eval`` writes it (hista.sveb.eval)."""
    rows = []
    for k, (field, conts) in enumerate([("number", [1, 0, 1]), ("choice", [0, 0, 1]), ("number", [1, 1, 1])]):
        target = sum(conts) / len(conts)
        rows.append({"case_id": f"p{k}#s0", "field": field, "target": target, "group_mean": 0.5,
                     "continuations": conts, "state": {"rollout": 0, "t": 1},
                     "values": {"grpo": 0.5, "hista": target / 2}})
    methods = {"grpo": {"name": "grpo", "config": {}}, "hista": {"name": "hista", "config": {"layer": -1}}}
    data = {"hista_version": "0.1.0", "cases_file": "cases.jsonl", "settings": {"model": "tiny"},
            "methods": methods, "labels": {"grpo": "GRPO", "hista": "Hista"}, "cases": rows}
    data["summary"] = metrics.summarise([CaseRow.from_json(row) for row in rows], list(methods), n_boot=50, seed=0)
    return jsonable(data)


def write_results(tmp_path: Path, data) -> Path:
    path = tmp_path / "results.json"
    text = data if isinstance(data, (str, bytes)) else json.dumps(data, indent=1).replace(f'"{INF}"', "1e400")
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


RESULT_MUTATIONS = [
    ("methods", DELETE, "methods"), ("methods", [], "methods"), ("methods", {}, "methods"),
    ("methods.grpo", 1, "methods.grpo"), ("methods.MCS@1", {}, "methods.MCS@1"),
    ("labels", DELETE, "labels"), ("labels", [], "labels"), ("labels.grpo", 3, "labels.grpo"),
    ("summary", DELETE, "summary"), ("summary", None, "summary"),
    ("summary.n_boot", DELETE, "summary.n_boot"), ("summary.n_boot", 0, "summary.n_boot"),
    ("summary.n_boot", True, "summary.n_boot"), ("summary.n_boot", 2.5, "summary.n_boot"),
    ("summary.n_boot", 10**12, "summary.n_boot"),
    ("summary.seed", -1, "summary.seed"), ("summary.seed", "0", "summary.seed"),
    ("summary.mcs_rows", "MCS@1", "summary.mcs_rows"), ("summary.mcs_rows[0]", "MCS@0", "summary.mcs_rows[0]"),
    ("summary.mcs_rows[1]", 2, "summary.mcs_rows[1]"), ("summary.mcs_rows[1]", "MCS@1", "summary.mcs_rows"),
    ("cases", DELETE, "cases"), ("cases", {}, "cases"), ("cases", [], "cases"),
    ("cases[1]", 3, "cases[1]"),
    ("cases[1].case_id", DELETE, "cases[1].case_id"), ("cases[1].case_id", "", "cases[1].case_id"),
    ("cases[1].case_id", 5, "cases[1].case_id"), ("cases[2].case_id", "p0#s0", "cases[2].case_id"),
    ("cases[1].field", DELETE, "cases[1].field"), ("cases[1].field", "", "cases[1].field"),
    ("cases[1].field", "all", "cases[1].field"), ("cases[1].field", ["x"], "cases[1].field"),
    ("cases[1].target", DELETE, "cases[1].target"), ("cases[1].target", "0.3", "cases[1].target"),
    ("cases[1].target", True, "cases[1].target"), ("cases[1].target", 2, "cases[1].target"),
    ("cases[1].target", 0.5, "cases[1].target"), ("cases[1].target", INF, "cases[1].target"),
    ("cases[1].group_mean", DELETE, "cases[1].group_mean"), ("cases[1].group_mean", None, "cases[1].group_mean"),
    ("cases[1].continuations", DELETE, "cases[1].continuations"),
    ("cases[1].continuations", [], "cases[1].continuations"),
    ("cases[1].continuations[2]", "1", "cases[1].continuations[2]"),
    ("cases[1].values", DELETE, "cases[1].values"), ("cases[1].values", [0.5], "cases[1].values"),
    ("cases[4].values", DELETE, "cases[4].values"),  # after two rows are added
    ("cases[1].values.hista", DELETE, "cases[1].values.hista"),
    ("cases[1].values.hista", "0.5", "cases[1].values.hista"),
    ("cases[1].values.hista", True, "cases[1].values.hista"),
    ("cases[1].values.hista", INF, "cases[1].values.hista"),
    ("cases[1].values.nope", 0.5, "cases[1].values.nope"),
    ("cases[1].values.hista", 10**400, "cases[1].values.hista"),
    ("cases[1].values.hista", -1e301, "cases[1].values.hista"),
]


@pytest.mark.parametrize("where, value, field", RESULT_MUTATIONS, ids=[f"{w}={v!r}" if v is not DELETE else f"{w}-"
                                                                        for w, v, _ in RESULT_MUTATIONS])
def test_results_mutations_name_the_field(tmp_path, where, value, field):
    data = results_object()
    data["cases"] += [mutate(data["cases"][0], "case_id", f"extra{k}") for k in range(2)]
    path = write_results(tmp_path, mutate(data, where, value))
    with pytest.raises(InputError) as info:
        results.read(path)
    assert (info.value.path, info.value.field) == (str(path), field), str(info.value)
    assert f"{path}: field '{field}'" in str(info.value)


@pytest.mark.parametrize("text, needle", [
    ("", "is empty"), ("  \n", "is empty"), ("{}", "field 'methods': missing"), ("null", "got null"),
    ("[]", "got list"), ('"x"', "got string"), ("3", "got number"),
    (lambda t: t[: len(t) // 2], "bad JSON"),
    (lambda t: t.replace('"target": 1.0', '"target": NaN', 1), "NaN"),
    (b"{\n\xff}", "not UTF-8"),
])
def test_bad_results_files(tmp_path, text, needle):
    if callable(text):
        text = text(json.dumps(results_object(), indent=1))
    path = write_results(tmp_path, text)
    with pytest.raises(InputError) as info:
        results.read(path)
    assert str(path) in str(info.value) and needle in str(info.value)


def test_truncated_results_file_is_located_at_its_line(tmp_path):
    text = json.dumps(results_object(), indent=1)
    path = write_results(tmp_path, text[:200])
    with pytest.raises(InputError) as info:
        results.read(path)
    assert info.value.line == text[:200].count("\n") + 1


def test_missing_or_irregular_results_file(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        results.read(tmp_path / "none.json")
    with pytest.raises(InputError, match="not a regular file"):
        results.read(tmp_path)


def test_null_value_is_counted_as_skipped_not_dropped(tmp_path):
    """An estimator that returned NaN is stored as null: the report counts it in ``skipped``."""
    data = mutate(results_object(), "cases[1].values.hista", None)
    summary = results.summarise(results.read(write_results(tmp_path, data)))
    cell = summary["rows"]["hista"]["all"]
    assert (cell["n"], cell["skipped"]) == (2, 1)
    assert summary["rows"]["hista"]["choice"]["skipped"] == 1 and math.isnan(summary["rows"]["hista"]["choice"]["mae"])
    assert summary["rows"]["grpo"]["all"]["skipped"] == 0


def test_results_report_writes_the_report(tmp_path):
    path = write_results(tmp_path, results_object())
    paths, table = report_file(path, tmp_path / "report")
    assert set(paths) == {"markdown", "json", "mae_plot", "differences_plot", "delta_plot"}
    assert all(p.exists() for p in paths.values())
    assert "Hista" in table and "MCS@3" in table
    stored = json.loads((tmp_path / "report" / "report.json").read_text())["summary"]
    assert stored == results_object()["summary"]


def test_invalid_results_file_writes_no_report(tmp_path):
    path = write_results(tmp_path, mutate(results_object(), "cases[0].field", "all"))
    with pytest.raises(InputError):
        report_file(path, tmp_path / "report")
    assert not (tmp_path / "report").exists()


# --------------------------------------------------------------------------------------------
# real files: sveb build and sveb eval write what the readers accept
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_files(tmp_path_factory):
    from hista.cli import main

    root = tmp_path_factory.mktemp("sveb_files")
    built = root / "cases.jsonl"
    assert main(["sveb", "build", "--model", "tiny", "--tasks", "builtin:arith", "--tasks", "builtin:choice",
                 "--rollouts", "4", "--continuations", "3", "--max-new-tokens", "6", "--no-filter", "--seed", "5",
                 "--problems", "2", "--out", str(built)]) == 0
    out = root / "results.json"
    assert main(["sveb", "eval", "--cases", str(built), "--out", str(out)]) == 0
    return built, out


def test_real_case_file_passes(real_files):
    built, _ = real_files
    records = cases.read(built)
    assert len(records) == 4 and all(r["kind"] == "case" for r in records)
    for r in records:  # the offsets the builder stores tile the completion text
        for rollout in r["rollouts"]:
            spans = rollout["offsets"]
            assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
            assert not spans or spans[-1][1] <= len(rollout["completion_text"])


def test_recomputed_summary_equals_the_stored_one(real_files):
    _, out = real_files
    data = results.read(out)
    assert data["summary"]["n_boot"] == 2000
    assert jsonable(results.summarise(data, path=out)) == data["summary"]


def test_report_of_a_real_results_file(real_files, tmp_path):
    _, out = real_files
    paths, table = report_file(out, tmp_path / "report")
    assert json.loads(paths["json"].read_text())["summary"] == json.loads(out.read_text())["summary"]
    assert "MCS@1" in table


# --------------------------------------------------------------------------------------------
# property tests: anything read either validates or raises InputError
# --------------------------------------------------------------------------------------------


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([10**400, -(10**400), 2**63, 1e300, -1e308])
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12,
)


def _paths(obj, prefix: str = "") -> list[str]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for key, value in obj.items():
            out += _paths(value, f"{prefix}.{key}" if prefix else key)
    elif isinstance(obj, list):
        for k, value in enumerate(obj):
            out += _paths(value, f"{prefix}[{k}]")
    return out


CASE_PATHS = _paths(case_record())
RESULT_PATHS = _paths(results_object())


def _read_cases_or_input_error(text: bytes) -> None:

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cases.jsonl"
        path.write_bytes(text)
        try:
            records = cases.read(path)
        except InputError:
            return
    rows = []
    for record in records:  # what passes is usable by sveb eval
        if record["kind"] == "case":
            cases.group_of(record)
            rows.append(CaseRow(case_id=record["key"], field=record["field"], target=record["target"],
                                continuations=tuple(record["continuations"]), values={}))
    metrics.summarise(rows, [], n_boot=5)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(CASE_PATHS), st.one_of(st.just(DELETE), json_values)), min_size=1,
                max_size=3))
def test_fuzz_case_records(changes):
    record = case_record()
    for where, value in changes:
        try:
            record = mutate(record, where, value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change removed the path
    text = (dump(case_record("p1#s0")) + json.dumps(record) + "\n").encode()
    _read_cases_or_input_error(text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(json_values.map(json.dumps) | st.binary(max_size=40).map(lambda b: b.decode("latin-1")),
                max_size=3), st.booleans())
def test_fuzz_case_lines(lines, newline):
    text = "\n".join(lines) + ("\n" if newline and lines else "")
    _read_cases_or_input_error(text.encode("utf-8", errors="surrogatepass"))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(RESULT_PATHS), st.one_of(st.just(DELETE), json_values)), min_size=1,
                max_size=3))
def test_fuzz_results_files(changes):
    data = results_object()
    for where, value in changes:
        try:
            data = mutate(data, where, value)
        except (KeyError, IndexError, TypeError):
            continue
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "results.json"
        path.write_text(json.dumps(data))
        try:
            results.summarise(results.read(path), path=path)
        except InputError:
            pass


def test_gzip_case_file_reads_as_the_plain_one_and_a_corrupt_one_is_named(tmp_path):
    import gzip

    plain = Path(__file__).parents[1] / "data" / "sveb_cases_tiny.jsonl"
    packed = tmp_path / "cases.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert cases.read(packed) == cases.read(plain)
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(plain.read_bytes()[:100])
    with pytest.raises(InputError, match="broken.jsonl.gz.*gzip"):
        cases.read(broken)


def test_build_refuses_to_append_to_a_gzip_file(tmp_path):
    from hista.sveb.build import build
    from hista.sveb.presets import BuildConfig

    with pytest.raises(InputError, match="plain JSON lines"):
        build(BuildConfig(model="tiny", problems=1, rollouts=2, continuations=1), tmp_path / "cases.jsonl.gz",
              progress=False)


def test_a_missing_case_file_is_named_as_missing(tmp_path):
    """sveb eval, report and sweep read cases through read_cases: a wrong path says the file is not
    there (not that it holds no cases)."""
    with pytest.raises(InputError, match="no such case file"):
        cases.read_cases(tmp_path / "nowhere.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(InputError, match="holds no cases"):
        cases.read_cases(empty)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 2), st.integers(0, 5)), min_size=1, max_size=40))
def test_problems_are_the_problem_ids_joined_by_shared_prompts(draws):
    """problems_of names each problem id by the smallest id reachable through shared prompts
    (two ids with one prompt are one problem, and so is a chain of them)."""
    records = [{"key": f"p{i:02d}#s{s}", "prompt_ids": [prompt]} for i, s, prompt in draws]
    ids = sorted({cases.problem_of(r["key"]) for r in records})
    prompts = {i: {r["prompt_ids"][0] for r in records if cases.problem_of(r["key"]) == i} for i in ids}
    expected = {}
    for start in ids:  # the component of `start`: ids linked by a prompt they share, searched by hand
        seen, todo = {start}, [start]
        while todo:
            here = todo.pop()
            for other in ids:
                if other not in seen and prompts[here] & prompts[other]:
                    seen.add(other)
                    todo.append(other)
        expected[start] = min(seen)
    assert cases.problems_of(records) == expected
