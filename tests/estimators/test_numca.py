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
from hista.estimators.milestones import macro_path, merge_forward, parse_numbers, token_positions
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
# R0 (reward 1): x = 3 ; y = 5 ; ans 8   numbers 3 (token 2 -> p=3), 5 (token 6 -> p=7), 8 dropped
# R1 (reward 0): x = 3 ; y = 4 ; ans 7   3 (p=3), 4 (p=7)
# R2 (reward 1): y = 5 ; x = 3 ; 8       5 (p=3), 3 (p=7)            T = 9
# R3 (reward 0): no numbers              T = 2
# Table: V(∅) = 2/4 = 0.5, V{3} = (1+0)/2 = 0.5, V{3,5} = (1+1)/2 = 1, V{3,4} = 0, V{5} = 1.


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
    # λ = 1: A_k = R − V(S_{k−1}) on segments [0,3), [3,7), [7,T)
    torch.testing.assert_close(adv[0], _segments((1 - 0.5, 3), (1 - 0.5, 4), (1 - 1.0, 3)))
    torch.testing.assert_close(adv[1], _segments((0 - 0.5, 3), (0 - 0.5, 4), (0 - 0.0, 3)))
    torch.testing.assert_close(adv[2], _segments((1 - 0.5, 3), (1 - 1.0, 4), (1 - 1.0, 2)))
    torch.testing.assert_close(adv[3], _segments((0 - 0.5, 2)))
    scaled = get("numca", merge_tokens=1).token_advantages(_example_group())
    torch.testing.assert_close(scaled[0], adv[0] / STD4)


def test_hand_example_lambda_zero_and_half():
    est = get("numca", merge_tokens=1)
    adv = est.token_advantages(_example_group(), gae_lambda=0.0, scale="none")
    # λ = 0: A_k = δ_k = V(S_k) − V(S_{k−1}), last δ = R − V(S_last)
    torch.testing.assert_close(adv[0], _segments((0.5 - 0.5, 3), (1.0 - 0.5, 4), (1 - 1.0, 3)))
    torch.testing.assert_close(adv[1], _segments((0.5 - 0.5, 3), (0.0 - 0.5, 4), (0 - 0.0, 3)))
    torch.testing.assert_close(adv[2], _segments((1.0 - 0.5, 3), (1.0 - 1.0, 4), (1 - 1.0, 2)))
    half = est.token_advantages(_example_group(), gae_lambda=0.5, scale="none")
    # R1: A_3 = 0, A_2 = −0.5 + 0.5·0 = −0.5, A_1 = 0 + 0.5·(−0.5) = −0.25
    torch.testing.assert_close(half[1], _segments((-0.25, 3), (-0.5, 4), (0.0, 3)))


def test_hand_example_merging():
    # merge_tokens = 5: R0's milestone at p=3 is 4 < 5 before p=7 -> merged: one segment [0,7)
    # from ∅ straight to {3,5}; λ = 0 gives δ = V{3,5} − V(∅) = 0.5 there.
    adv = get("numca", merge_tokens=5).token_advantages(_example_group(), gae_lambda=0.0, scale="none")
    torch.testing.assert_close(adv[0], _segments((0.5, 7), (0.0, 3)))
    torch.testing.assert_close(adv[1], _segments((-0.5, 7), (0.0, 3)))
    # the default 50 merges every milestone of these short texts into the last one
    assert torch.equal(get("numca").token_advantages(_example_group(), scale="none")[0][:7], torch.full((7,), 0.5))


def test_hand_example_state_values_and_fallback():
    est, g = get("numca", merge_tokens=1), _example_group()
    states = [State(0, 0), State(0, 2), State(0, 3), State(0, 6), State(0, 7), State(0, 10), State(1, 8), State(3, 2)]
    torch.testing.assert_close(est.state_values(g, states), torch.tensor([0.5, 0.5, 0.5, 0.5, 1.0, 1.0, 0.0, 0.5]))
    # external prefixes: every number counts (no final-answer drop); an unreached state falls
    # back along its chain: {5, 9} -> {5} = 1; {4} -> ∅ = 0.5; {3, 4} is known = 0
    prefixes = [["y", "=", "5", ";", "9"], ["y", "=", "4"], ["x", "=", "3", ";", "y", "=", "4"]]
    ext = [State(prefix=_rollout(p)) for p in prefixes]
    torch.testing.assert_close(est.state_values(g, ext), torch.tensor([1.0, 0.5, 0.0]))
    # the first t tokens of a prefix: "y = 5" -> {5} = 1 (not the last number of R: kept)
    torch.testing.assert_close(est.state_values(g, [State(t=3, prefix=_rollout(prefixes[0]))]), torch.tensor([1.0]))
    zero = get("numca", merge_tokens=1, unreached="zero")
    torch.testing.assert_close(zero.state_values(g, ext), torch.tensor([0.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match="outside"):
        est.state_values(g, [State(0, 11)])


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
    same = get("numca", parser="digits", persist=True, merge_repeats=True, unreached="zero")
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
    # step 2 sees V(∅) = (1 + 1 + 0 + 1) / 4 = 0.75 (prompt "q" is kept apart)
    adv = est.token_advantages(step2, scale="none")
    torch.testing.assert_close(torch.cat(adv), torch.tensor([-0.75, 0.25]))
    assert est.state_values(step2, [State(0, 1)]).item() == pytest.approx(0.75)
    assert set(est.tables) == {"p", "q"} and len(est.tables["p"]) == 1
    est.reset("q")
    assert set(est.tables) == {"p"}
    est.reset()
    assert est.tables == {}
    torch.testing.assert_close(torch.cat(est.token_advantages(step2, scale="none")), torch.tensor([-0.5, 0.5]))
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
    default = get("numca", parser="digits").token_advantages(g, scale="none")
    # default: the last segment [T, T) is empty but its δ = R − V{1,2} still flows back (λ = 1)
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
    macro = get("numca", parser="digits", answered="table")
    torch.testing.assert_close(macro.state_values(g, [State(0, 1), State(0, 2), State(0, 3)]),
                               torch.tensor([2 / 3, 0.5, 0.5]))
    # the default: once the final number ("6", token 3) has begun, the rollout's reward (0)
    default = get("numca", parser="digits").state_values(g, [State(0, 1), State(0, 2), State(0, 3)])
    torch.testing.assert_close(default, torch.tensor([2 / 3, 0.5, 0.0]))
    # an external prefix keeps its final number in the path: answered does not apply
    prefix = State(prefix=_rollout(["4", " and 5", " then 6"], 0.0))
    torch.testing.assert_close(get("numca", parser="digits").state_values(g, [prefix]),
                               macro.state_values(g, [prefix]))
    with pytest.raises(ValueError, match="answered"):
        get("numca", answered="maybe")


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
    g = _group(spec)
    grpo = get("grpo").token_advantages(g)
    for kw in PROFILE_KW:
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
