"""Sharded SVEB builds and their merge (SPEC §8, hista.sveb.shards), on the tiny model."""

import json

import pytest

from hista import sharding
from hista.cli import main

pytestmark = pytest.mark.xdist_group("sveb-shards")  # its module fixtures are built once (tests/conftest.py)

# 3 + 3 problems in chunks of 8 // 4 = 2 problems: three chunks
BUILD = ["sveb", "build", "--model", "tiny", "--tasks", "builtin:arith", "--tasks", "builtin:choice",
         "--rollouts", "4", "--continuations", "3", "--max-new-tokens", "6", "--no-filter", "--problems", "3",
         "--batch-size", "8"]


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_every_layout_covers_each_chunk_exactly_once(n):
    for count in range(10):
        picked = [c for k in range(1, n + 1) for c in sharding.chunks_of(count, (k, n))]
        assert sorted(picked) == list(range(count))


@pytest.mark.parametrize("text", ["0/3", "4/3", "3", "a/b", "1/0", "-1/2"])
def test_a_bad_shard_is_refused_by_name(text, tmp_path, capsys):
    assert main(BUILD + ["--seed", "5", f"--shard={text}", "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "--shard" in capsys.readouterr().err


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A single build and the three shards of the same build (seed 5), and shard 3 of seed 6."""
    root = tmp_path_factory.mktemp("shards")
    assert main(BUILD + ["--seed", "5", "--out", str(root / "single.jsonl")]) == 0
    for k in (1, 2, 3):
        assert main(BUILD + ["--seed", "5", "--shard", f"{k}/3", "--out", str(root / f"part{k}.jsonl")]) == 0
    assert main(BUILD + ["--seed", "6", "--shard", "3/3", "--out", str(root / "other3.jsonl")]) == 0
    return root


def test_merged_shards_equal_a_single_build(built, tmp_path):
    parts = [str(built / f"part{k}.jsonl") for k in (3, 1, 2)]  # any order
    assert main(["sveb", "merge", *parts, "--out", str(tmp_path / "merged.jsonl")]) == 0
    assert (tmp_path / "merged.jsonl").read_bytes() == (built / "single.jsonl").read_bytes()
    lines = [len((built / f"part{k}.jsonl").read_text().splitlines()) for k in (1, 2, 3)]
    assert lines == [2, 2, 2]  # two problems (one chunk) each
    manifest = json.loads((built / "part2.jsonl.shard.json").read_text())
    assert manifest["shard"] == [2, 3] and manifest["problems"] == 6 and [p for p, _ in manifest["order"]] == [2, 3]


def _merge_error(parts, out, capsys):
    assert main(["sveb", "merge", *map(str, parts), "--out", str(out)]) == 2
    assert not out.exists()
    return capsys.readouterr().err


def test_merge_refuses_a_missing_shard(built, tmp_path, capsys):
    err = _merge_error([built / "part1.jsonl", built / "part2.jsonl"], tmp_path / "m.jsonl", capsys)
    assert "shard 3/3 missing" in err


def test_merge_refuses_a_repeated_shard(built, tmp_path, capsys):
    parts = [built / "part1.jsonl", built / "part2.jsonl", built / "part2.jsonl", built / "part3.jsonl"]
    assert "is shard 2/3 again" in _merge_error(parts, tmp_path / "m.jsonl", capsys)


def test_merge_refuses_parts_of_another_build(built, tmp_path, capsys):
    parts = [built / "part1.jsonl", built / "part2.jsonl", built / "other3.jsonl"]
    err = _merge_error(parts, tmp_path / "m.jsonl", capsys)
    assert "other3.jsonl" in err and "another build" in err and "seed" in err


def test_merge_refuses_an_unfinished_part_and_a_record_of_another_shard(built, tmp_path, capsys):
    for k in (1, 2, 3):
        for suffix in ("", ".shard.json"):
            (tmp_path / f"part{k}.jsonl{suffix}").write_bytes((built / f"part{k}.jsonl{suffix}").read_bytes())
    part2 = tmp_path / "part2.jsonl"
    full = part2.read_text()
    part2.write_text(full.splitlines(keepends=True)[0])
    parts = [tmp_path / f"part{k}.jsonl" for k in (1, 2, 3)]
    err = _merge_error(parts, tmp_path / "m.jsonl", capsys)
    assert "part2.jsonl" in err and "shard 2/3 is unfinished" in err
    part2.write_text(full + (tmp_path / "part3.jsonl").read_text().splitlines(keepends=True)[0])
    assert "not in shard 2/3" in _merge_error(parts, tmp_path / "m.jsonl", capsys)


def test_a_shard_file_resumes_only_as_the_same_shard(built, tmp_path, capsys):
    out = tmp_path / "part.jsonl"
    for suffix in ("", ".shard.json"):
        (tmp_path / f"part.jsonl{suffix}").write_bytes((built / f"part1.jsonl{suffix}").read_bytes())
    before = out.read_bytes()
    assert main(BUILD + ["--seed", "5", "--shard", "1/3", "--out", str(out)]) == 0  # resumes: nothing to add
    assert out.read_bytes() == before
    assert main(BUILD + ["--seed", "5", "--shard", "2/3", "--out", str(out)]) == 2
    assert "another shard" in capsys.readouterr().err and out.read_bytes() == before
