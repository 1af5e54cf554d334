"""Difficulty-filtered training pools (issue 42 item 2; SPEC §9; hista.train.pool): measured once
with the base policy into the run folder (``pool.new/``, put in place of ``pool/`` when training
begins: issue 62), resumed from the last whole chunk when cut short, reused by a resume and by a
rerun with another band, refused when nothing is kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_train import SMOKE

from hista.cli import main
from hista.errors import InputError
from hista.train import pool
from hista.train.recipe import load_recipe
from hista.train.run import load_problems


def test_the_recipe_key_and_its_defaults():
    assert load_recipe(SMOKE).pool_filter is None
    assert load_recipe(SMOKE, ["pool_filter=true"]).pool_filter == {"band": [0.15, 0.75], "samples": 20,
                                                                     "max_new_tokens": None, "seed": None}
    assert load_recipe(SMOKE, ["pool_filter={band: [0, 1], samples: 4}"]).pool_filter["band"] == [0.0, 1.0]
    for bad, needle in (("{band: [0.8, 0.1]}", "lo <= hi"), ("{band: [0.1]}", "band"),
                        ("{samples: 0}", r"in \[1, 1024\]"), ("{samples: 1025}", r"in \[1, 1024\]"),
                        ("{bands: [0, 1]}", "unknown key 'bands'"), ("{max_new_tokens: 1.5}", "integer"),
                        ("{band: [0, 2]}", "<= 1"), ("{seed: -1}", r"in \[0, 4294967295\]"),
                        ("{seed: 4294967296}", r"in \[0, 4294967295\]")):
        with pytest.raises(InputError, match=needle) as err:
            load_recipe(SMOKE, [f"pool_filter={bad}"])
        assert err.value.field == "pool_filter"


def _measure(tmp_path: Path, band=(0.0, 0.0), problems=40, extra=(), pool_extra=""):
    from hista.models import load

    recipe = load_recipe(SMOKE, ["model=tiny", f"problems={problems}", f"output_dir={tmp_path}",
                                 f"pool_filter={{band: [{band[0]}, {band[1]}], samples: 2{pool_extra}}}", *extra])
    kept, _ = pool.filtered(recipe, load_problems(recipe), load("tiny", device="cpu"), recipe.pool_filter,
                            temperature=0.7, top_p=1.0, max_new_tokens=6, folder=tmp_path / "pool")
    return recipe, kept


def test_measure_pool_measures_as_the_run_would_and_names_the_folder(tmp_path):
    from hista.train import measure_pool

    recipe = load_recipe(SMOKE, ["model=tiny", "problems=6", f"output_dir={tmp_path}", "trl.max_completion_length=6",
                                 "pool_filter={band: [0, 0], samples: 2}"])
    kept, folder = measure_pool(recipe)
    assert folder == tmp_path / "pool.new" and len(kept) == 6  # the tiny model solves nothing
    assert [json.loads(line)["id"] for line in (folder / "pool.jsonl").read_text().splitlines()] == \
        [rec["id"] for _, rec in kept]
    folder.rename(tmp_path / "pool")  # as a run puts it in place when training begins
    assert measure_pool(recipe) == (kept, tmp_path / "pool")  # read, not measured again
    with pytest.raises(InputError, match="filters no pool") as err:
        measure_pool(load_recipe(SMOKE, ["model=tiny"]))
    assert err.value.field == "pool_filter"


def test_a_measurement_cut_short_resumes_from_its_last_whole_chunk(tmp_path, capsys):
    recipe, kept = _measure(tmp_path / "full")
    assert len(kept) == 40  # the tiny model solves nothing: every accuracy is 0, inside [0, 0]
    whole = (tmp_path / "full" / "pool.new" / "accuracy.jsonl").read_bytes()
    assert whole.count(b"\n") == 40
    capsys.readouterr()
    cut = tmp_path / "cut" / "pool.new"
    cut.mkdir(parents=True)
    (cut / "settings.json").write_bytes((tmp_path / "full" / "pool.new" / "settings.json").read_bytes())
    lines = whole.splitlines(keepends=True)
    (cut / "accuracy.jsonl").write_bytes(b"".join(lines[:35]) + lines[35][:10])  # a crash mid-chunk 2
    _, again = _measure(tmp_path / "cut")
    out = capsys.readouterr().out
    assert "chunk 2/2" in out and "chunk 1/2" not in out  # the whole first chunk was kept
    assert (cut / "accuracy.jsonl").read_bytes() == whole and again == kept
    _measure(tmp_path / "cut")
    assert "as measured before" in capsys.readouterr().out  # the pool is read, not measured again


def test_a_fixed_pool_seed_lets_runs_of_other_seeds_share_the_pool(tmp_path, capsys):
    from hista import tasks

    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(json.dumps(r) + "\n" for r in tasks.load("builtin:arith", n=8, split="train")))
    task = [f"tasks=jsonl:{problems}", "problems=null"]
    _, kept = _measure(tmp_path / "s0", band=(0.0, 1.0), extra=task, pool_extra=", seed: 0")
    capsys.readouterr()
    other = tmp_path / "s1" / "pool"  # a pool in place: the earlier run's
    other.mkdir(parents=True)
    for name in ("settings.json", "accuracy.jsonl", "pool.jsonl"):
        (other / name).write_bytes((tmp_path / "s0" / "pool.new" / name).read_bytes())
    _, again = _measure(tmp_path / "s1", band=(0.0, 1.0), extra=task + ["seed=1"], pool_extra=", seed: 0")
    assert "as measured before" in capsys.readouterr().out and again == kept
    _measure(tmp_path / "s1", band=(0.0, 1.0), extra=task + ["seed=1"])  # the run's own seed: another pool
    assert "chunk 1/1" in capsys.readouterr().out


def test_a_pool_belongs_to_its_problems(tmp_path, capsys):
    _measure(tmp_path, band=(0.0, 1.0), problems=8, pool_extra=", seed: 0")
    capsys.readouterr()
    _measure(tmp_path, band=(0.0, 1.0), problems=8, extra=["seed=1"], pool_extra=", seed: 0")
    assert "chunk 1/1" in capsys.readouterr().out  # seed 1 draws other built-in problems: measured afresh


def test_a_band_nothing_lies_in_is_refused_and_a_wider_band_reuses_the_measurement(tmp_path, capsys):
    with pytest.raises(InputError, match="no problem of 40 has an accuracy in") as err:
        _measure(tmp_path, band=(0.5, 1.0))
    assert err.value.field == "pool_filter"
    assert (tmp_path / "pool.new" / "accuracy.jsonl").read_bytes().count(b"\n") == 40  # measured, kept for a rerun
    assert not (tmp_path / "pool").exists()
    capsys.readouterr()
    _, kept = _measure(tmp_path, band=(0.0, 0.5))  # the band chooses among the accuracies: nothing measured again
    out = capsys.readouterr().out
    assert "chunk" not in out and "kept 40 of 40" in out and len(kept) == 40
    assert json.loads((tmp_path / "pool.new" / "settings.json").read_text())["band"] == [0.0, 0.5]


def test_a_run_that_fails_before_training_leaves_the_earlier_pool_as_it_was(tmp_path, monkeypatch, capsys):
    """Issue 62 (F8): an --overwrite run measures its pool into pool.new/ and puts it in place
    of the earlier run's pool/ when training begins; one that fails before then changes no byte
    of the earlier run, and the next try trains on its measurement."""
    import hista.train.run as run

    out = tmp_path / "run"
    _measure(out, band=(0.0, 1.0), problems=8)
    pool.place(out / "pool.new", out / "pool")  # the earlier run's pool and metrics
    (out / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\n')
    before = _files(out)

    def broken(recipe):
        raise InputError("no such model", field="model")

    monkeypatch.setattr(run, "load_policy", broken)
    args = ["train", str(SMOKE), "model=tiny", f"output_dir={out}", "problems=8", "trl.max_completion_length=6",
            "dynamic_sampling=false", "pool_filter={band: [0, 1], samples: 3}", "trl.max_steps=1", "--overwrite"]
    assert main(args) == 2
    after = _files(out)
    assert {k: v for k, v in after.items() if not k.startswith("pool.new/")} == before
    assert json.loads(after["pool.new/settings.json"])["samples"] == 3
    monkeypatch.undo()
    capsys.readouterr()
    assert main(args) == 0
    assert f"as measured before ({out / 'pool.new' / 'pool.jsonl'})" in capsys.readouterr().out
    assert json.loads((out / "pool" / "settings.json").read_text())["samples"] == 3 and not (out / "pool.new").exists()
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [1]
    assert (out / "metrics.jsonl").read_bytes() != before["metrics.jsonl"]


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_hista_train_filters_its_pool_once(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", str(SMOKE), "model=tiny", f"output_dir={out}", "problems=8", "trl.max_completion_length=6",
            "dynamic_sampling=false", "pool_filter={band: [0, 0.5], samples: 2}", "trl.save_steps=1"]
    assert main(args + ["trl.max_steps=1"]) == 0
    assert "kept 8 of 8 problems" in capsys.readouterr().out
    saved = (out / "recipe.yaml").read_text()
    assert "band:" in saved and "  seed: null\n" in saved
    (out / "recipe.yaml").write_text(saved.replace("  seed: null\n", ""))  # a run from before pool_filter.seed
    assert main(args + ["trl.max_steps=2", "resume=true"]) == 0
    assert "8 of 8 problems, as measured before" in capsys.readouterr().out
    assert main(args[:-2] + ["pool_filter={band: [0, 0.5], samples: 3}", "trl.save_steps=1", "trl.max_steps=3",
                             "resume=true"]) == 2  # another filter is another run
