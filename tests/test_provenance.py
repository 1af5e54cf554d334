"""Results name the code that made them (hista.provenance; issue 67, part 8)."""

import subprocess

from hista import __version__, provenance


def test_a_checkout_names_its_commit_and_whether_tracked_files_changed():
    code = provenance.code()
    assert code["hista"] == __version__
    if not (provenance.ROOT / ".git").exists():  # an installed copy: nothing to name
        assert code["commit"] is None and code["dirty"] is None
        return
    head = subprocess.run(["git", "-C", str(provenance.ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert code["commit"] == head.stdout.strip() and len(code["commit"]) == 40
    assert isinstance(code["dirty"], bool)


def test_a_copy_outside_a_checkout_names_no_commit(tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()  # a repository around the copy that is not hista's own checkout
    monkeypatch.setattr(provenance, "ROOT", tmp_path)
    assert provenance.code.__wrapped__() == {"hista": __version__, "commit": None, "dirty": None}
