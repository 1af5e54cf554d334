"""Numca (SPEC §4.2): parser, milestones, hand-computed advantages and values, properties,
persistence and parity with the reference implementation (golden file)."""

import json
import math
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hista.estimators import get
from hista.estimators.milestones import macro_path, merge_forward, parse_numbers, token_positions, whole_at
from hista.estimators.numca import Numca, NumcaConfig
from hista.estimators.numca_reference import NumcaReferenceConfig
from hista.types import Rollout, RolloutGroup, State

GOLDEN = Path(__file__).parents[1] / "data" / "numca_reference_golden.json"
STD4 = math.sqrt(1 / 3) + 1e-4  # unbiased std of rewards [1, 0, 1, 0], + 1e-4


def _rollout(tokens, reward=0.0):
    """A rollout whose completion tokens are the given strings (offsets = their spans)."""
    offsets, pos = [], 0
    for tok in tokens:
        offsets.append((pos, pos + len(tok)))
        pos += len(tok)
    return Rollout([1], list(range(10, 10 + len(tokens))), reward, completion_text="".join(tokens), offsets=offsets)


def _keys(text, parser="default"):
    return [n.key for n in parse_numbers(text, parser)]


# ---- parser ---------------------------------------------------------------------------------


def test_default_parser_normalises():
    assert _keys("05 5 5.0 10/2 5.") == ["5"] * 5
    assert _keys("0.5 .5 1/2 2/4 \\frac{1}{2} \\dfrac12 \\tfrac{ 1 }{ 2 }") == ["1/2"] * 7
    assert _keys("-3.5 (-7/2) = −3.5") == ["-7/2"] * 3


def test_default_parser_separators_signs_and_glue():
    assert _keys("$1,000 and 12,345,678") == ["1000", "12345678"]
    assert _keys("1,2,3 (3, 4) 1,0001") == ["1", "2", "3", "3", "4", "1", "1"]
    assert _keys("x-1 2-3 a - 4 is -5") == ["1", "2", "3", "4", "-5"]
    assert _keys("x2 3x 2nd H2O 50% 1e5") == ["2", "3", "2", "2", "50", "1", "5"]
    assert _keys("6 / 3 1/0 1.2.3") == ["6", "3", "1", "0", "6/5", "3"]
    assert _keys("-\\frac{1}{2} \\frac{\\sqrt3}{2} \\frac{3}{0}") == ["-1/2", "3", "2", "3", "0"]
    # positions: the first character, sign and \frac included
    spans = [(n.start, n.end) for n in parse_numbers("a -\\frac{1}{2} b 1,000")]
    assert spans == [(2, 14), (17, 22)]


def test_digits_parser_is_the_reference_rule():
    assert _keys("05 5 5.0 -3 1/2 1,000 x2 ٣", "digits") == ["05", "5", "5", "0", "3", "1", "2", "1", "000", "2", "٣"]
    assert [n.start for n in parse_numbers("ab12 3", "digits")] == [2, 5]
    with pytest.raises(ValueError, match="unknown parser"):
        parse_numbers("1", "roman")


def test_token_positions():
    # tokens "ab" [0,2), "1" [2,3), "23 4" [3,7), "" [7,7), "5" [7,8)
    offsets = [(0, 2), (2, 3), (3, 7), (7, 7), (7, 8)]
    # p = number of tokens up to and including the token that holds the character
    assert token_positions([0, 2, 3, 5, 7, 8], offsets) == [1, 2, 3, 3, 5, 5]
    assert token_positions([0], []) == [0]


def test_a_number_is_whole_once_a_character_follows_that_no_number_goes_on_with():
    text = "17 + 29 = 46. 3.5x 1,000 \\frac {1} {2}$ 7"
    numbers = parse_numbers(text)
    assert [n.key for n in numbers] == ["17", "29", "46", "7/2", "1000", "1/2", "7"]
    # whole at "+", "=", then 46 only at the "x" (". 3.5" could still be part of numbers), at
    # "\\" and "$"; the last 7 never is (the text ends)
    assert whole_at(text, numbers) == [3, 8, 17, 17, 25, 38, None]
    assert whole_at("٣4a", parse_numbers("٣4a", "digits"), "digits") == [2]  # any Unicode digit goes on


PIECES = ["1", "2", "0", "46", ".", ",", "/", "-", "\u2212", " ", "{", "}", "\\frac", "\\dfrac", "x", "=", "$", "000"]


@settings(max_examples=200, deadline=None)
@given(pieces=st.lists(st.sampled_from(PIECES), max_size=16), parser=st.sampled_from(["default", "digits"]))
def test_a_prefix_reads_the_whole_numbers_the_text_reads(pieces, parser):
    """Issue 63: the numbers a prefix holds whole, by its own parse, are those of the whole text
    that are whole by then, so Numca's state of s_t does not depend on the tokens after t."""
    text = "".join(pieces)

    def whole(prefix: str, end: int) -> list:
        numbers = parse_numbers(prefix, parser)
        return [(n.key, n.start) for n, c in zip(numbers, whole_at(prefix, numbers, parser))
                if c is not None and c < end]

    for end in range(len(text) + 1):
        assert whole(text[:end], end) == whole(text, end)


def test_merge_forward_uses_the_merged_next_position():
    # right to left: 5->9? 9-5=4 >= 3 keeps 5; 3->5 (2 < 3); 1 vs the merged 5: 4 >= 3 keeps 1
    assert merge_forward([1, 3, 5, 9], 3) == [1, 5, 5, 9]
    # a run of close milestones collapses in hops of at least `merge`
    assert merge_forward([0, 10, 20, 30, 40, 100], 25) == [10, 10, 40, 40, 40, 100]
    assert merge_forward([4, 4, 9], 0) == [4, 4, 9]
    assert merge_forward([], 50) == []


def test_macro_path_repeats_and_merging():
    keys, pos = ["3", "3", "8"], [10, 40, 100]
    # default: only first occurrences are milestones: 3@10 is 90 before 8@100, no merge
    assert macro_path(keys, pos, 50) == [(10, frozenset({"3"})), (100, frozenset({"3", "8"}))]
    # reference: the repeat at 40 takes part: 40 -> stays (60 >= 50), 10 -> 40 (30 < 50)
    assert macro_path(keys, pos, 50, merge_repeats=True) == [(40, frozenset({"3"})), (100, frozenset({"3", "8"}))]
    # milestones merged onto one position become one holding the largest set
    assert macro_path(["1", "2", "3"], [1, 3, 5], 3) == [(1, frozenset({"1"})), (5, frozenset({"1", "2", "3"}))]


# ---- hand-computed example ------------------------------------------------------------------
#
# R0 (reward 1): x = 3 ; y = 5 ; ans 8   numbers 3 (token 2), 5 (token 6), 8 dropped (drop_last)
# R1 (reward 0): x = 3 ; y = 4 ; ans 7   3 (token 2), 4 (token 6)
# R2 (reward 1): y = 5 ; x = 3 ; 8       5 (token 2), 3 (token 6)            T = 9
# R3 (reward 0): no numbers              T = 2
# Table counts: ∅ 4 (rewards sum 2), {3} R0 R1, {3,5} R0 R2, {3,4} R1, {5} R2.
#
# Default (states="prefix", leave_one_out): a number counts once a character follows it, so the
# milestones are the ";" after it: p = 4 and 8. A state of rollout i is valued by the others:
#   R0: V(∅) = 1/3, V{3} = 0 (R1), V{3,5} = 1 (R2)
#   R1: V(∅) = 2/3, V{3} = 1 (R0), V{3,4} reached by no other -> falls back to V{3} = 1
#   R2: V(∅) = 1/3, V{5} -> V(∅) = 1/3, V{3,5} = 1 (R0)
#   R3: V(∅) = 2/3
#
# PATH, the rule before issue 63 (the reference's): milestones at a number's first token (p = 3
# and 7), the final number dropped, the whole group in the table: V(∅) = 0.5, V{3} = 0.5,
# V{3,5} = 1, V{3,4} = 0, V{5} = 1.

PATH = {"states": "path", "leave_one_out": False, "drop_last": True}


def _example_group():
    toks = lambda a, b, c: ["x", "=", a, ";", "y", "=", b, ";", "ans", c]  # noqa: E731
    return RolloutGroup(
        [
            _rollout(toks("3", "5", "8"), 1.0),
            _rollout(toks("3", "4", "7"), 0.0),
            _rollout(["y", "=", "5", ";", "x", "=", "3", ";", "8"], 1.0),
            _rollout(["no", " numbers"], 0.0),
        ],
        prompt_id="example",
    )


def _segments(*parts):
    return torch.tensor([v for v, n in parts for _ in range(n)])


def test_hand_example_lambda_one_is_reward_minus_previous_value():
    adv = get("numca", merge_tokens=1).token_advantages(_example_group(), gae_lambda=1.0, scale="none")
    # λ = 1: A_k = R − V(S_{k−1}) on segments [0,4), [4,8), [8,T)
    torch.testing.assert_close(adv[0], _segments((1 - 1 / 3, 4), (1 - 0.0, 4), (1 - 1.0, 2)))
    torch.testing.assert_close(adv[1], _segments((0 - 2 / 3, 4), (0 - 1.0, 4), (0 - 1.0, 2)))
    torch.testing.assert_close(adv[2], _segments((1 - 1 / 3, 4), (1 - 1 / 3, 4), (1 - 1.0, 1)))
    torch.testing.assert_close(adv[3], _segments((0 - 2 / 3, 2)))
    scaled = get("numca", merge_tokens=1).token_advantages(_example_group())
    torch.testing.assert_close(scaled[0], adv[0] / STD4)
    path = get("numca", merge_tokens=1, **PATH).token_advantages(_example_group(), gae_lambda=1.0, scale="none")
    torch.testing.assert_close(path[0], _segments((1 - 0.5, 3), (1 - 0.5, 4), (1 - 1.0, 3)))
    torch.testing.assert_close(path[1], _segments((0 - 0.5, 3), (0 - 0.5, 4), (0 - 0.0, 3)))
    torch.testing.assert_close(path[2], _segments((1 - 0.5, 3), (1 - 1.0, 4), (1 - 1.0, 2)))
    torch.testing.assert_close(path[3], _segments((0 - 0.5, 2)))


def test_hand_example_lambda_zero_and_half():
    est = get("numca", merge_tokens=1)
    adv = est.token_advantages(_example_group(), gae_lambda=0.0, scale="none")
    # λ = 0: A_k = δ_k = V(S_k) − V(S_{k−1}), last δ = R − V(S_last)
    torch.testing.assert_close(adv[0], _segments((0.0 - 1 / 3, 4), (1.0 - 0.0, 4), (1 - 1.0, 2)))
    torch.testing.assert_close(adv[1], _segments((1.0 - 2 / 3, 4), (1.0 - 1.0, 4), (0 - 1.0, 2)))
    torch.testing.assert_close(adv[2], _segments((1 / 3 - 1 / 3, 4), (1.0 - 1 / 3, 4), (1 - 1.0, 1)))
    half = est.token_advantages(_example_group(), gae_lambda=0.5, scale="none")
    # R1: A_3 = −1, A_2 = 0 + 0.5·(−1) = −0.5, A_1 = 1/3 + 0.5·(−0.5) = 1/12
    torch.testing.assert_close(half[1], _segments((1 / 12, 4), (-0.5, 4), (-1.0, 2)))
    path = get("numca", merge_tokens=1, **PATH)
    adv = path.token_advantages(_example_group(), gae_lambda=0.0, scale="none")
    torch.testing.assert_close(adv[0], _segments((0.5 - 0.5, 3), (1.0 - 0.5, 4), (1 - 1.0, 3)))
    torch.testing.assert_close(adv[1], _segments((0.5 - 0.5, 3), (0.0 - 0.5, 4), (0 - 0.0, 3)))
    torch.testing.assert_close(adv[2], _segments((1.0 - 0.5, 3), (1.0 - 1.0, 4), (1 - 1.0, 2)))
    half = path.token_advantages(_example_group(), gae_lambda=0.5, scale="none")
    torch.testing.assert_close(half[1], _segments((-0.25, 3), (-0.5, 4), (0.0, 3)))


def test_hand_example_merging():
    # merge_tokens = 5: R0's milestone at p=4 is 4 < 5 before p=8 -> merged: one segment [0,8)
    # from ∅ straight to {3,5}; λ = 0 gives δ = V{3,5} − V(∅) = 1 − 1/3 there.
    adv = get("numca", merge_tokens=5).token_advantages(_example_group(), gae_lambda=0.0, scale="none")
    torch.testing.assert_close(adv[0], _segments((2 / 3, 8), (0.0, 2)))
    torch.testing.assert_close(adv[1], _segments((1 - 2 / 3, 8), (-1.0, 2)))
    # the default merges nothing (a merge looks ahead): λ = 1 gives R − V(∅), then R − V{3}
    default = get("numca").token_advantages(_example_group(), scale="none")[0]
    torch.testing.assert_close(default[:8], _segments((2 / 3, 4), (1.0, 4)))
    # merge_tokens = 50 merges every milestone of these short texts into the last one
    merged = get("numca", merge_tokens=50).token_advantages(_example_group(), scale="none")[0]
    torch.testing.assert_close(merged[:8], torch.full((8,), 2 / 3))


def test_hand_example_state_values_and_fallback():
    est, g = get("numca", merge_tokens=1), _example_group()
    # R0 at t = 0, 2, 3 ("x=3": the 3 may go on), 4 ("x=3;": {3}), 7, 8 ({3,5}), 10 (the end: 8
    # may go on); R1 at 8: {3,4}, reached by no other, falls back to {3}; R3 at 2: ∅
    states = [State(0, 0), State(0, 2), State(0, 3), State(0, 4), State(0, 7), State(0, 8), State(0, 10),
              State(1, 8), State(3, 2)]
    torch.testing.assert_close(est.state_values(g, states),
                               torch.tensor([1 / 3, 1 / 3, 1 / 3, 0.0, 0.0, 1.0, 1.0, 1.0, 2 / 3]))
    # external prefixes are valued alike, from the whole group's table: {5, 9} -> {5} = 1;
    # {4} -> ∅ = 0.5; {3, 4} is known = 0
    prefixes = [["y", "=", "5", ";", "9", ";"], ["y", "=", "4", ";"], ["x", "=", "3", ";", "y", "=", "4", ";"]]
    ext = [State(prefix=_rollout(p)) for p in prefixes]
    torch.testing.assert_close(est.state_values(g, ext), torch.tensor([1.0, 0.5, 0.0]))
    # the first t tokens of a prefix: "y=5" -> ∅ (the 5 may go on), "y=5;" -> {5} = 1
    firsts = [State(t=t, prefix=_rollout(prefixes[0])) for t in (3, 4)]
    torch.testing.assert_close(est.state_values(g, firsts), torch.tensor([0.5, 1.0]))
    zero = get("numca", merge_tokens=1, unreached="zero")
    torch.testing.assert_close(zero.state_values(g, ext), torch.tensor([0.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match="outside"):
        est.state_values(g, [State(0, 11)])


def test_hand_example_path_state_values():
    est, g = get("numca", merge_tokens=1, **PATH), _example_group()
    states = [State(0, 0), State(0, 2), State(0, 3), State(0, 6), State(0, 7), State(0, 10), State(1, 8), State(3, 2)]
    torch.testing.assert_close(est.state_values(g, states), torch.tensor([0.5, 0.5, 0.5, 0.5, 1.0, 1.0, 0.0, 0.5]))
    # external prefixes: every number counts (no final-answer drop); an unreached state falls
    # back along its chain: {5, 9} -> {5} = 1; {4} -> ∅ = 0.5; {3, 4} is known = 0
    prefixes = [["y", "=", "5", ";", "9"], ["y", "=", "4"], ["x", "=", "3", ";", "y", "=", "4"]]
    ext = [State(prefix=_rollout(p)) for p in prefixes]
    torch.testing.assert_close(est.state_values(g, ext), torch.tensor([1.0, 0.5, 0.0]))
    # the first t tokens of a prefix: "y = 5" -> {5} = 1 (not the last number of R: kept)
    torch.testing.assert_close(est.state_values(g, [State(t=3, prefix=_rollout(prefixes[0]))]), torch.tensor([1.0]))
    zero = get("numca", merge_tokens=1, unreached="zero", **PATH)
    torch.testing.assert_close(zero.state_values(g, ext), torch.tensor([0.0, 0.0, 0.0]))


def test_a_state_is_valued_by_the_other_rollouts_from_its_own_tokens():
    """Issue 63: V_i(s_t) reads neither R_i nor rollout i's tokens after t. Flipping R0 leaves
    R0's values alone; R0's numbers count only where its tokens complete them ("4" may become
    "46"), and a state no other rollout reached falls back along its chain."""
    est, g = get("numca"), _example_group()
    states = [State(0, t) for t in range(11)]
    flipped = RolloutGroup([_rollout(["x", "=", "3", ";", "y", "=", "5", ";", "ans", "8"], 0.0), *g.rollouts[1:]])
    assert torch.equal(est.state_values(g, states), est.state_values(flipped, states))
    g = RolloutGroup([_rollout(["x", "=", "4", ";", " then", " 5"], 1.0),
                      _rollout(["x", "=", "4", "6", ";", " then", " 5"], 1.0),
                      _rollout(["x", "=", "4", "1", ";", " then", " 5"], 0.0),
                      _rollout(["x", "=", "4", "6", ";", " then", " 7"], 0.0)])
    # rollout 1: "x=4" and "x=46" hold no complete number yet (∅: the others' mean 1/3), "x=46;"
    # holds {46}, which rollout 3 reached (0); rollout 2's {41} no other reached: ∅ = 2/3
    torch.testing.assert_close(est.state_values(g, [State(1, 3), State(1, 4), State(1, 5), State(2, 5)]),
                               torch.tensor([1 / 3, 1 / 3, 0.0, 2 / 3]))
    # a group of one has no other rollout: its states are worth its reward (advantage 0)
    alone = RolloutGroup([_rollout(["1", " 2"], 1.0)])
    assert est.state_values(alone, [State(0, 0), State(0, 2)]).tolist() == [1.0, 1.0]


# ---- configuration --------------------------------------------------------------------------


def test_profiles_and_config():
    d = get("numca")
    assert d.config == NumcaConfig() and d.config.profile == "default" and not d.config.persist
    r = get("numca", profile="reference")
    c = r.config
    assert (c.profile, c.parser, c.persist, c.merge_tokens) == ("reference", "digits", True, 50)
    assert get("numca", profile="reference", merge_tokens=20).config.merge_tokens == 20
    assert json.loads(r.config.to_json())["profile"] == "reference"
    assert r.to_dict()["name"] == "numca"
    for bad in ({"profile": "paper"}, {"parser": "x"}, {"merge_tokens": -1}, {"bogus": 1}):
        with pytest.raises(ValueError):
            get("numca", **bad)


def test_reference_quirks_live_in_the_reference_config():
    ref = get("numca", profile="reference", group_padding=False, state_value_rule="macro")
    assert isinstance(ref, Numca) and isinstance(ref.config, NumcaReferenceConfig) and ref.needs_text
    # without its two quirks the reference profile is the default code with the reference preset
    same = get("numca", parser="digits", persist=True, merge_repeats=True, unreached="zero", merge_tokens=50, **PATH)
    g, states = _example_group(), [State(i, t) for i in range(4) for t in range(3)]
    for a, b in zip(ref.token_advantages(g, gae_lambda=0.5), same.token_advantages(g, gae_lambda=0.5)):
        assert torch.equal(a, b)
    assert torch.equal(ref.state_values(g, states), same.state_values(g, states))
    for bad in ({"group_padding": True}, {"state_value_rule": "macro"}):
        with pytest.raises(ValueError, match="unknown parameter"):
            get("numca", **bad)
    with pytest.raises(ValueError, match="state_value_rule"):
        get("numca", profile="reference", state_value_rule="paper")


def test_missing_offsets_is_a_clear_error():
    g = RolloutGroup([Rollout([1], [2, 3], 1.0, completion_text="1 2")], prompt_id="p")
    with pytest.raises(ValueError, match="offsets"):
        get("numca").token_advantages(g)


# ---- persistence ----------------------------------------------------------------------------


def test_persist_accumulates_and_reset_clears():
    est = get("numca", persist=True)
    step1 = RolloutGroup([_rollout(["a"], 1.0), _rollout(["b"], 1.0)], prompt_id="p")
    step2 = RolloutGroup([_rollout(["c"], 0.0), _rollout(["d"], 1.0)], prompt_id="p")
    other = RolloutGroup([_rollout(["e"], 0.0), _rollout(["f"], 0.0)], prompt_id="q")
    est.token_advantages(step1, scale="none")
    est.token_advantages(other, scale="none")
    # step 2 sees rewards 1, 1, 0, 1 (prompt "q" is kept apart), each rollout without its own:
    # V(∅) = 3/3 for "c", 2/3 for "d"
    adv = est.token_advantages(step2, scale="none")
    torch.testing.assert_close(torch.cat(adv), torch.tensor([-1.0, 1 / 3]))
    assert est.state_values(step2, [State(0, 1)]).item() == pytest.approx(1.0)
    assert set(est.tables) == {"p", "q"} and len(est.tables["p"]) == 1
    est.reset("q")
    assert set(est.tables) == {"p"}
    est.reset()
    assert est.tables == {}
    torch.testing.assert_close(torch.cat(est.token_advantages(step2, scale="none")), torch.tensor([-1.0, 1.0]))
    # non-persistent estimators keep nothing
    plain = get("numca")
    plain.token_advantages(step1)
    assert plain.tables == {}
    with pytest.raises(ValueError, match="prompt_id"):
        est.token_advantages(RolloutGroup([_rollout(["a"], 1.0)]))


def test_the_tables_come_back_from_their_state_and_a_foreign_state_is_refused():
    """SPEC §9 (issue 41, item 4): with ``persist=True`` ``state_dict()`` holds every prompt's
    table and ``load_state_dict`` of it gives the same values, and the same advantages at the
    next step, bit for bit; a state that is not what Numca writes (a missing or extra field, NaN,
    a count of 0, a state twice, a parent out of order) is an InputError naming the field, and
    the tables stay as they were. Without ``persist`` the state is None."""
    from hista.errors import InputError

    est = get("numca", persist=True)
    est.token_advantages(_example_group(), scale="none")
    est.token_advantages(RolloutGroup([_rollout(["1", "+", "2"], 1.0), _rollout(["none"], 0.0)], prompt_id="q"))
    copy = get("numca", persist=True)
    copy.load_state_dict(est.state_dict())
    assert {p: t.stats for p, t in copy.tables.items()} == {p: t.stats for p, t in est.tables.items()}
    assert len(copy.tables["example"]) > 1  # states beyond the empty one
    for a, b in zip(est.token_advantages(_example_group()), copy.token_advantages(_example_group()), strict=True):
        assert torch.equal(a, b)
    assert get("numca").state_dict() is None

    def damaged(change) -> dict:
        state = est.state_dict()
        change(state["tables"]["example"])
        return state

    def twice(table):
        table["key"][2] = table["key"][1]
        table["parent"][2] = table["parent"][1]

    for state, field in [(damaged(lambda t: t.pop("count")), "tables['example'].count"),
                         (damaged(lambda t: t.update(extra=1)), "tables['example'].extra"),
                         (damaged(lambda t: t["total"].__setitem__(0, float("nan"))), "tables['example'].total"),
                         (damaged(lambda t: t["count"].__setitem__(1, 0.0)), "tables['example'].count"),
                         (damaged(lambda t: t.update(count=t["count"][:-1].clone())), "tables['example'].count"),
                         (damaged(lambda t: t["parent"].__setitem__(1, 5)), "tables['example'][1]"),
                         (damaged(twice), "tables['example'][2]"),
                         (damaged(lambda t: t.update(key=t["key"][:1] + [7] + t["key"][2:])), "tables['example'].key"),
                         ({"tables": {"": est.state_dict()["tables"]["q"]}}, "tables"),
                         ({"tables": []}, "tables"), ({}, "tables"), ({"tables": {}, "history": []}, "history")]:
        with pytest.raises(InputError) as caught:
            copy.load_state_dict(state)
        assert caught.value.field == field, (field, caught.value)
    assert set(copy.tables) == {"example", "q"}


# ---- reference profile quirks ---------------------------------------------------------------


def test_reference_last_milestone_on_final_token_of_longest():
    # "1 2 3" as tokens ["1 ", "2 3"]: numbers 1 (p=1), 2 (p=2), 3 dropped; merged -> {1,2} at p=2 = T.
    # "2 1 5" as one token: {1,2} at p=1 = T. V(∅) = V{1,2} = 0.5.
    g = RolloutGroup([_rollout(["1 ", "2 3"], 1.0), _rollout(["2 1 5"], 0.0)], prompt_id="p")
    default = get("numca", parser="digits", merge_tokens=50, **PATH).token_advantages(g, scale="none")
    # the default code: no value point before T after the merging, one segment R − V(∅)
    torch.testing.assert_close(default[0], torch.tensor([0.5, 0.5]))
    reference = get("numca", profile="reference").token_advantages(g, scale="none")
    # reference: padded to the longest completion (2): rollout 0 ends exactly there, so it has
    # no R − V segment and gets δ = V{1,2} − V(∅) = 0; rollout 1 (padded) still gets R − V(∅)
    torch.testing.assert_close(reference[0], torch.tensor([0.0, 0.0]))
    torch.testing.assert_close(reference[1], torch.tensor([-0.5]))


def test_reference_sveb_state_value_rule():
    # The reference SVEB script works in characters. Rollout 0, "4 and 5 then 6" (reward 0):
    # digits 4@0, 5@6, 6 dropped; 4 merges forward (6 < 50 characters) -> {4,5} at character 6.
    # Rollout 1 "4 or 6" (reward 1): {4}. Rollout 2 "5 4 9" (reward 1): {5}, {4,5}.
    # Table: V(∅) = 2/3, V{4} = 1/2, V{4,5} = 1/2, V{5} = 1.
    g = RolloutGroup(
        [_rollout(["4", " and 5", " then 6"], 0.0), _rollout(["4 or", " 6"], 1.0), _rollout(["5 4", " 9"], 1.0)],
        prompt_id="p",
    )
    # λ = 0 character advantages of rollout 0: [0,6): 1/2 − 2/3 = −1/6, [6,14): R − V{4,5} = −1/2.
    # V(c) = V(∅) + the advantages of segments ending before character c (where they change),
    # plus, at the very end of the text, the last advantage R − V:
    # t=0 (c=0): 2/3; t=1 (c=1): 2/3; t=2 (c=7): 2/3 − 1/6 = 1/2; t=3 (c=14): 1/2 − 1/2 = 0
    values = get("numca", profile="reference").state_values(g, [State(0, 0), State(0, 1), State(0, 2), State(0, 3)])
    torch.testing.assert_close(values, torch.tensor([2 / 3, 2 / 3, 0.5, 0.0]))
    # the macro rule: V of the macro state at t (tokens; milestone {4,5} at token 2 after merging)
    macro = get("numca", parser="digits", merge_tokens=50, **PATH)
    torch.testing.assert_close(macro.state_values(g, [State(0, 1), State(0, 2), State(0, 3)]),
                               torch.tensor([2 / 3, 0.5, 0.5]))
    # answered="reward": once the final number ("6", token 3) has begun, the rollout's reward (0)
    reward = get("numca", parser="digits", merge_tokens=50, answered="reward", **PATH)
    torch.testing.assert_close(reward.state_values(g, [State(0, 1), State(0, 2), State(0, 3)]),
                               torch.tensor([2 / 3, 0.5, 0.0]))
    # an external prefix keeps its final number in the path: answered does not apply
    prefix = State(prefix=_rollout(["4", " and 5", " then 6"], 0.0))
    torch.testing.assert_close(reward.state_values(g, [prefix]), macro.state_values(g, [prefix]))
    with pytest.raises(ValueError, match="answered"):
        get("numca", answered="maybe")
    with pytest.raises(ValueError, match="drop_last=True"):
        get("numca", answered="reward")


# ---- properties -----------------------------------------------------------------------------

TOKENS = ["1", "2", "3", "12", " ", "x", "=", "/", ".", " 5", "-", "0", "ab", ",", "\\frac{1}{2}", "7 8"]
_completion = st.lists(st.sampled_from(TOKENS), max_size=30)
_groups = st.lists(st.tuples(_completion, st.sampled_from([0.0, 1.0])), min_size=1, max_size=6)


def _group(spec, prompt_id="p"):
    return RolloutGroup([_rollout(toks, r) for toks, r in spec], prompt_id=prompt_id)


PROFILE_KW = [{"merge_tokens": 3}, {"merge_tokens": 3, "parser": "digits"}, {"profile": "reference", "merge_tokens": 3}]


@settings(max_examples=60, deadline=None)
@given(spec=_groups, seed=st.integers(0, 10_000), lam=st.sampled_from([0.0, 0.5, 1.0]))
def test_permuting_rollouts_permutes_advantages(spec, seed, lam):
    perm = torch.randperm(len(spec), generator=torch.Generator().manual_seed(seed)).tolist()
    for kw in PROFILE_KW:
        a = get("numca", **kw).token_advantages(_group(spec), gae_lambda=lam)
        b = get("numca", **kw).token_advantages(_group([spec[k] for k in perm]), gae_lambda=lam)
        for new, old in enumerate(perm):
            torch.testing.assert_close(b[new], a[old])
            assert a[old].shape == (len(spec[old][0]),) and not torch.isnan(a[old]).any()


@settings(max_examples=40, deadline=None)
@given(spec=_groups, reward=st.sampled_from([0.0, 1.0, 0.7]))
def test_all_equal_rewards_give_zero(spec, reward):
    g = _group([(toks, reward) for toks, _ in spec])
    for kw in PROFILE_KW:
        for adv in get("numca", **kw).token_advantages(g):
            assert adv.abs().max().item() < 1e-6 if adv.numel() else True


@settings(max_examples=40, deadline=None)
@given(spec=st.lists(st.tuples(st.lists(st.sampled_from(["a", " b", "x=", "", "."]), max_size=8),
                               st.sampled_from([0.0, 1.0])), min_size=1, max_size=6),
       lam=st.sampled_from([0.0, 0.9, 1.0]))
def test_without_numbers_numca_is_grpo(spec, lam):
    """Without numbers Numca is GRPO: with the leave-one-out mean by default, GRPO's group mean
    (the rollout's own reward in it) in the reference profile."""
    g = _group(spec)
    for kw in PROFILE_KW:
        grpo = get("grpo", leave_one_out=kw.get("profile") != "reference").token_advantages(g)
        for a, b in zip(get("numca", **kw).token_advantages(g, gae_lambda=lam), grpo):
            torch.testing.assert_close(a, b)


def test_degenerate_groups():
    empty = _group([([], 1.0), ([], 0.0), (["1", " 2"], 1.0)])
    for kw in PROFILE_KW:
        adv = get("numca", **kw).token_advantages(empty)
        assert [a.shape[0] for a in adv] == [0, 0, 2] and not torch.isnan(torch.cat(adv)).any()
        one = get("numca", **kw).token_advantages(_group([(["1", " 2", " 3"], 1.0)]))
        assert torch.equal(one[0], torch.zeros(3))
        assert get("numca", **kw).token_advantages(RolloutGroup([], prompt_id="p")) == []
        values = get("numca", **kw).state_values(empty, [State(0, 0), State(2, 2)])
        assert not torch.isnan(values).any()


# ---- parity with the reference implementation -----------------------------------------------


def test_reference_profile_matches_golden_file():
    """Outputs of the reference implementation (github.com/VOXXXX1874/Hista) on seeded random
    groups, recorded by a parity script outside this repository: advantages of consecutive
    training steps (tables persist per prompt) and SVEB state values (table of the group)."""
    golden = json.loads(GOLDEN.read_text())
    est = get("numca", profile="reference")
    for k, case in enumerate(golden["groups"]):
        group = RolloutGroup(
            [
                Rollout([1], ids, r, completion_text=t, offsets=[tuple(o) for o in off])
                for ids, t, off, r in zip(case["completion_ids"], case["texts"], case["offsets"], case["rewards"])
            ],
            prompt_id=case["prompt_id"],
        )
        adv = est.token_advantages(group, gae_lambda=case["gae_lambda"])
        for mine, ref in zip(adv, case["advantages"]):
            ref = torch.tensor(ref)
            assert mine.shape == ref.shape
            assert ((mine - ref).abs() <= 1e-5 * ref.abs().clamp_min(1.0)).all(), f"group {k}"
        states = [State(i, t) for i, t in case["states"]]
        values = get("numca", profile="reference").state_values(group, states)
        torch.testing.assert_close(values, torch.tensor(case["state_values"]), atol=1e-5, rtol=0)
