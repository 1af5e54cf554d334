"""Every bad input of the table in tests/reliability/bad_inputs.py exits 2 with a message naming the file,
line, field or option, prints no traceback and leaves every file as it was (issue 10, SPEC §11).
Devices are stood in for by FIFOs made in a temporary folder; the real /dev is never touched."""

import json
import signal

import pytest
from bad_inputs import cases, changed, make_files, snapshot

from hista.cli import main

CASES = cases()


def _alarm(signum, frame):
    raise TimeoutError("the command hung (a FIFO opened for reading or writing?)")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_exits_2_with_a_located_message_and_damages_nothing(case, tmp_path, monkeypatch, capsys):
    make_files(tmp_path, case)
    monkeypatch.chdir(tmp_path)
    for key, value in case.env.items():
        monkeypatch.setenv(key, value)
    before = snapshot(tmp_path)
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(120)
    try:
        code = main(case.argv)
    except SystemExit as exc:  # argparse: a usage error names the option
        code = exc.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "error:" in err and "Traceback" not in err
    for name in case.names:
        assert name in err, f"{name!r} not in {err!r}"
    assert changed(before, snapshot(tmp_path)) == []


def test_an_output_symlink_is_written_through(tmp_path, monkeypatch, capsys):
    """A symlink at --out stays a symlink; the file it names gets the new content (SPEC §11)."""
    from bad_inputs import CASES_FILE

    monkeypatch.chdir(tmp_path)
    (tmp_path / "cases.jsonl").write_bytes(CASES_FILE.read_bytes())
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "results.json").write_text('{"an earlier result": true}\n')
    (tmp_path / "link.json").symlink_to("store/results.json")
    assert main(["sveb", "eval", "--cases", "cases.jsonl", "--methods", "grpo", "--out", "link.json"]) == 0
    assert (tmp_path / "link.json").is_symlink()
    assert json.loads((tmp_path / "store" / "results.json").read_text())["methods"].keys() == {"grpo"}
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == ["results.json"]  # no temporary file left
