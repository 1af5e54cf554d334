"""Atomic writes (hista.jsonio): complete or untouched, and readable like any other new file."""

import os
import re
import stat
from pathlib import Path

import pytest

from hista.errors import InputError
from hista.jsonio import check_output_dir, check_output_file, read_records, write_atomic, write_json_atomic


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_outputs_respect_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        path = write_json_atomic(tmp_path / "results.json", {"a": 1})
        png = write_atomic(tmp_path / "plot.png", lambda fh: fh.write(b"\x89PNG"), mode="wb")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == mode and stat.S_IMODE(png.stat().st_mode) == mode


def test_a_failed_write_leaves_the_old_file(tmp_path):
    path = write_json_atomic(tmp_path / "r.json", {"old": True})

    def fail(fh):
        fh.write("partial")
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError):
        write_atomic(path, fail)
    assert path.read_text().strip().startswith("{") and sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


# --------------------------------------------------------------------------------------------
# output preflight (SPEC §11): never replace or block on anything but a regular file
# --------------------------------------------------------------------------------------------


def _dead_pid() -> int:
    """A pid that no process has: a child that has exited and been reaped."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_fifo_at_the_path_is_refused_and_left_alone(tmp_path):
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="FIFO") as err:
        write_json_atomic(fifo, {"a": 1})
    assert err.value.path == str(fifo)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_a_directory_at_the_path_is_refused_and_left_alone(tmp_path):
    d = tmp_path / "out.json"
    d.mkdir()
    (d / "keep").write_text("x")
    with pytest.raises(InputError, match="directory"):
        write_json_atomic(d, {"a": 1})
    assert d.is_dir() and (d / "keep").read_text() == "x"


def test_a_parent_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="is not a directory"):
        check_output_file(tmp_path / "file" / "sub" / "out.json")
    with pytest.raises(InputError, match="is not a directory"):
        write_json_atomic(tmp_path / "file" / "out.json", {"a": 1})
    assert (tmp_path / "file").read_text() == "x"


def test_a_symlink_is_written_through_and_stays_a_symlink(tmp_path):
    real_dir = tmp_path / "real"
    real_dir.mkdir()
    target = real_dir / "data.json"
    target.write_text('{"old": true}\n')
    link = tmp_path / "link.json"
    os.symlink(target, link)
    assert check_output_file(link) == target.resolve()
    write_json_atomic(link, {"new": True})
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert '"new": true' in target.read_text()
    assert sorted(p.name for p in real_dir.iterdir()) == ["data.json"]  # no temporary file left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real"]


def test_a_chain_of_symlinks_is_followed(tmp_path):
    target = tmp_path / "t.json"
    target.write_text('{"old": 1}')
    os.symlink(target, tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    write_json_atomic(tmp_path / "b", [1])
    assert (tmp_path / "b").is_symlink() and (tmp_path / "a").is_symlink() and target.read_text() == "[\n 1\n]\n"


def test_a_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link.json"
    os.symlink(tmp_path / "sub" / "made.json", link)
    write_json_atomic(link, {"a": 1})
    assert link.is_symlink() and (tmp_path / "sub" / "made.json").read_text().startswith("{")


def test_a_symlink_to_a_fifo_is_refused(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    os.symlink(fifo, tmp_path / "link.json")
    with pytest.raises(InputError, match="FIFO"):
        write_json_atomic(tmp_path / "link.json", {"a": 1})
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and (tmp_path / "link.json").is_symlink()


def test_stale_temporaries_of_dead_writers_are_removed_live_ones_kept(tmp_path):
    dead = _dead_pid()
    stale = tmp_path / f".out.json.{dead}.abc123.tmp"
    live = tmp_path / f".out.json.{os.getpid()}.def456.tmp"
    other = tmp_path / f".other.json.{dead}.abc123.tmp"  # another file's: not ours to clean
    for p in (stale, live, other):
        p.write_text("partial")
    write_json_atomic(tmp_path / "out.json", {"a": 1})
    assert not stale.exists() and live.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name, "out.json"])


def test_temporary_files_are_named_for_recognition(tmp_path):
    seen = []

    def write(fh):
        seen.extend(p.name for p in tmp_path.iterdir())
        fh.write("x")

    write_atomic(tmp_path / "r.txt", write)
    assert len(seen) == 1 and re.fullmatch(rf"\.r\.txt\.{os.getpid()}\.[A-Za-z0-9_]+\.tmp", seen[0])


@pytest.mark.parametrize("path", ["/proc/self/hista-test-nonexistent", "/sys/hista-test-nonexistent",
                                  "/dev/hista-test-nonexistent"])
def test_system_paths_are_refused_without_writing(path):
    with pytest.raises(InputError, match="refusing to write under") as err:
        check_output_file(path)
    assert err.value.path == path and not os.path.lexists(path)


def test_a_symlink_into_a_system_path_is_refused(tmp_path):
    os.symlink("/proc/self/hista-test-nonexistent", tmp_path / "link")
    with pytest.raises(InputError, match="/proc"):
        check_output_file(tmp_path / "link")


def test_check_output_file_returns_the_target_and_creates_nothing(tmp_path):
    assert check_output_file(tmp_path / "new" / "x.json") == (tmp_path / "new" / "x.json").resolve()
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_folder_is_refused(tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    real_access = os.access
    # os.access is faked for ``ro`` so that the test also means something when run as root
    monkeypatch.setattr(os, "access", lambda p, mode: False if os.fspath(p) == os.fspath(ro.resolve())
                        else real_access(p, mode))
    with pytest.raises(InputError, match="not writable"):
        check_output_file(ro / "sub" / "x.json")
    with pytest.raises(InputError, match="not writable"):
        write_json_atomic(ro / "x.json", {"a": 1})
    with pytest.raises(InputError, match="not writable"):
        check_output_dir(ro)
    assert list(ro.iterdir()) == []


def test_check_output_dir(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        check_output_dir(tmp_path / "file")
    with pytest.raises(InputError, match="is not a directory"):
        check_output_dir(tmp_path / "file" / "report")
    with pytest.raises(InputError, match="refusing to write under"):
        check_output_dir("/proc/self/hista-test-nonexistent")
    report = tmp_path / "report"
    report.mkdir()
    os.mkfifo(report / "report.md")
    with pytest.raises(InputError, match="FIFO"):
        check_output_dir(report, ["report.json", "report.md"])
    assert check_output_dir(tmp_path / "new", ["a.md"]) == (tmp_path / "new").resolve()
    assert not (tmp_path / "new").exists()


def test_write_report_fails_on_a_bad_folder_before_plotting(tmp_path):
    from hista.sveb import report

    (tmp_path / "out").write_text("not a folder")
    with pytest.raises(InputError, match="not a directory"):
        report.write_report({}, [], {}, tmp_path / "out")  # an empty summary would fail if it got further
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "dir" / "mae.png")
    with pytest.raises(InputError, match="FIFO"):
        report.write_report({}, [], {}, tmp_path / "dir")
    assert sorted(p.name for p in (tmp_path / "dir").iterdir()) == ["mae.png"]


def test_cases_append_on_a_fifo_fails_without_blocking(tmp_path):
    import threading

    from hista.sveb import cases

    fifo = tmp_path / "cases.jsonl"
    os.mkfifo(fifo)
    outcome = []

    def run():
        try:
            cases.append(fifo, {"kind": "skip", "key": "k", "settings": {}})
            outcome.append("returned")
        except InputError as exc:
            outcome.append(exc)
        except BaseException as exc:  # anything else is reported to the main thread
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=10)
    if worker.is_alive():  # unblock the hung open so the daemon thread can finish, then fail
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        os.close(fd)
        pytest.fail("cases.append blocked on a FIFO")
    assert len(outcome) == 1 and isinstance(outcome[0], InputError), outcome
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_cases_append_never_blocks_on_a_fifo_that_appears_after_the_check(tmp_path, monkeypatch):
    import threading

    from hista import jsonio
    from hista.sveb import cases

    fifo = tmp_path / "cases.jsonl"
    os.mkfifo(fifo)
    monkeypatch.setattr(jsonio, "check_output_file", lambda p, kind=None: fifo)  # the preflight saw a regular file
    outcome = []

    def run():
        try:
            cases.append(fifo, {"kind": "skip", "key": "k", "settings": {}})
            outcome.append("returned")
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=10)
    if worker.is_alive():
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        pytest.fail("cases.append blocked on a FIFO")
    assert len(outcome) == 1 and isinstance(outcome[0], InputError), outcome


def test_cases_append_writes_through_a_symlink(tmp_path):
    from hista.sveb import cases

    target = tmp_path / "real.jsonl"
    os.symlink(target, tmp_path / "link.jsonl")
    cases.append(tmp_path / "link.jsonl", {"kind": "skip", "key": "a", "settings": {}})
    cases.append(tmp_path / "link.jsonl", {"kind": "skip", "key": "b", "settings": {}})
    assert (tmp_path / "link.jsonl").is_symlink() and len(target.read_text().splitlines()) == 2


def test_a_failed_write_names_no_leftover_temporary(tmp_path):
    with pytest.raises(RuntimeError):
        write_atomic(tmp_path / "x.txt", lambda fh: (_ for _ in ()).throw(RuntimeError("boom")))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name, earlier, replaced", [
    ("r.json", b'{"an earlier result": 1}\n', True),
    ("r.json", b"my notes\n", False),
    ("r.json", b"[1, 2]\n", False),
    ("v.jsonl", b'{"kind": "header"}\n{"x": 1}\n', True),
    ("v.jsonl", b'{"kind": "hea', True),  # the first line of an append-only file cut by a crash
    ("v.jsonl", b"hello", False),
    ("v.jsonl", b'{"a": 1}\nnot json\n', True),  # the first line decides
    ("t.md", b"# hista eval compare\n", True),
    ("t.md", b"my notes\n", False),
    ("p.png", b"\x89PNG\r\n\x1a\n...", True),
    ("p.png", b"GIF89a", False),
    ("notes.txt", b"anything\n", True),  # no kind: any regular file (callers name a kind where they know it)
    ("r.json", b"", True),  # empty
])
def test_only_an_earlier_output_of_the_same_kind_is_replaced(tmp_path, name, earlier, replaced):
    """Issue 29 (SPEC §11): an existing file at an output path is replaced only when it holds
    what the output holds; someone's notes named as --out are refused, byte for byte intact."""
    path = tmp_path / name
    path.write_bytes(earlier)
    if replaced:
        check_output_file(path)
    else:
        with pytest.raises(InputError, match="hista replaces only its own earlier outputs"):
            check_output_file(path)
        assert path.read_bytes() == earlier


def test_an_explicit_kind_wins_over_the_suffix(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("my notes\n")
    check_output_file(path)  # no kind: replaceable
    with pytest.raises(InputError, match="not a JSON object"):
        check_output_file(path, "json")
    with pytest.raises(InputError, match="not a JSON object"):
        write_json_atomic(path, {"x": 1})
    assert path.read_text() == "my notes\n"


def test_a_full_disk_is_exit_2_naming_the_file_and_loses_nothing(tmp_path, monkeypatch, capsys):
    """Issue 29, item 16: ENOSPC while writing a result file (atomic write or append) is an
    InputError naming the file; the earlier file and its folder are as they were."""
    import errno

    from hista import jsonio
    from hista.cli import main

    cases = Path(__file__).parent / "data" / "sveb_cases_tiny.jsonl"
    out = tmp_path / "results.json"
    out.write_text('{"an earlier result": true}\n')
    real_fsync = os.fsync

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(jsonio.os, "fsync", full)
    assert main(["sveb", "eval", "--cases", str(cases), "--methods", "grpo", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{out}: cannot write (No space left on device)" in err and "Traceback" not in err
    assert out.read_text() == '{"an earlier result": true}\n' and sorted(p.name for p in tmp_path.iterdir()) == \
        ["results.json"]
    with pytest.raises(InputError, match="No space left on device"):
        jsonio.append_jsonl(tmp_path / "log.jsonl", [{"a": 1}])
    monkeypatch.setattr(jsonio.os, "fsync", real_fsync)
    # an OSError without a file name (the disk filled elsewhere) is exit 2 as well, not a traceback
    from hista.cli import data

    def boom(args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(data, "cmd_models", boom)
    assert main(["models"]) == 2 and "No space left on device" in capsys.readouterr().err


def test_read_records_leaves_out_a_cut_line_and_names_a_bad_one(tmp_path):
    """The one reader of the append-only JSON-lines files hista resumes (a pool, sveb grad's
    measurements): a missing file holds nothing, a last line a crash cut short is left out
    (the file unchanged), and a line that is not a JSON object is named by its number."""
    path = tmp_path / "pool.jsonl"
    assert read_records(path, "pool file") == []
    path.write_text('{"id": 1}\n\n{"id": 2}\n{"id": 3, "tex')
    assert read_records(path, "pool file") == [{"id": 1}, {"id": 2}]
    assert path.read_text().endswith('{"id": 3, "tex')
    path.write_text('{"id": 1}\n[2]\n')
    with pytest.raises(InputError, match="line 2 is not a JSON object") as info:
        read_records(path, "pool file")
    assert info.value.line == 2 and str(path) in str(info.value)
    path.write_text('{"id": 1}\nmy notes')
    with pytest.raises(InputError, match="is not a pool file"):
        read_records(path, "pool file")
