"""The command line (SPEC §11): --help everywhere, bad input -> exit 2 with file:line and
field and nothing written, and `hista sample` end to end."""

import json

import pytest

from hista.cli import build_parser, main


@pytest.mark.parametrize("argv", [[], ["sample"], ["models"], ["tasks"]])
def test_help_on_every_command(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv + ["--help"])
    assert exit_.value.code == 0
    assert "usage: hista" in capsys.readouterr().out


@pytest.mark.parametrize(
    "line, needle",
    [('{"problem": "1+1", "answer": "2"}\n{"problem": "2+2", "answer": \n', ":2"),
     ('{"problem": "1+1", "answer": "2"}\n{"problem": "2+2"}\n', "answer")],
)
def test_bad_jsonl_exits_2_and_writes_nothing(tmp_path, capsys, line, needle):
    data = tmp_path / "tasks.jsonl"
    data.write_text(line)
    out = tmp_path / "out.jsonl"
    code = main(["sample", "--model", "tiny", "--tasks", f"jsonl:{data}", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and f"{data}:2" in err and needle in err
    assert not out.exists() and list(tmp_path.iterdir()) == [data]


def test_sample_tiny_end_to_end(tmp_path, capsys):
    data = tmp_path / "tasks.jsonl"
    data.write_text('{"problem": "What is 2 + 3?", "answer": "5"}\n'
                    '{"problem": "Pick A.\\nA) yes\\nB) no", "answer": "A", "verifier": "choice", "field": "mc"}\n')
    out = tmp_path / "rollouts.jsonl"
    code = main(["sample", "--model", "tiny", "--tasks", f"jsonl:{data}", "--rollouts", "3",
                 "--max-new-tokens", "8", "--out", str(out), "--seed", "3"])
    printed = capsys.readouterr().out
    assert code == 0 and "mean accuracy" in printed and str(out) in printed
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 6 and {r["problem_id"] for r in rows} == {"tasks-1", "tasks-2"}
    for r in rows:
        assert r["reward"] in (0.0, 1.0) and len(r["offsets"]) == len(r["completion_ids"]) == len(r["logprobs"])
        assert r["model"] == "tiny" and r["sampling"]["max_new_tokens"] == 8 and r["seed"] == 3


def test_sample_embedded_model_end_to_end(tmp_path, capsys):
    """A short real run of the embedded SmolLM2 model (CI runs this path on the real model)."""
    out = tmp_path / "rollouts.jsonl"
    code = main(["sample", "--tasks", "builtin:arith?style=expr&steps=1&max_value=10", "--problems", "2",
                 "--rollouts", "2", "--max-new-tokens", "32", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0 and "mean accuracy" in printed and "example completion" in printed
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 4 and all(r["model"] == "smollm2-135m-instruct" for r in rows)
    assert all(r["completion_text"].strip() for r in rows)


def test_tasks_filter_keeps_problems_in_range(tmp_path, capsys):
    from hista import tasks

    out = tmp_path / "kept.jsonl"
    argv = ["tasks", "filter", "builtin:arith", "-n", "3", "--model", "tiny", "--samples", "2",
            "--max-new-tokens", "4", "--out", str(out)]
    # the untrained tiny model never answers: accuracy 0 everywhere
    assert main(argv + ["--lo", "0", "--hi", "0"]) == 0
    kept = tasks.load(f"jsonl:{out}")
    assert [k["problem"] for k in kept] == [p["problem"] for p in tasks.load("builtin:arith", n=3)]
    assert all(k["meta"]["accuracy"] == 0.0 for k in kept)
    assert main(argv + ["--lo", "0.1", "--hi", "0.8"]) == 0
    assert out.read_text() == "" and "kept 0 of 3" in capsys.readouterr().out
