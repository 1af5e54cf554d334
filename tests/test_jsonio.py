"""Atomic writes (hista.jsonio): complete or untouched, and readable like any other new file."""

import os
import stat

import pytest

from hista.jsonio import write_atomic, write_json_atomic


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
