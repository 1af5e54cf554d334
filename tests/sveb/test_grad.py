"""``hista sveb grad`` (issue 64; docs/sveb.md "Update direction"): the closed-form output-layer
step is the autograd one; exact Monte-Carlo credit points closer to the true gradient than GRPO's
and credit of reversed sign on half the tokens points further; the command runs end to end and
resumes."""

import json

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from hista import estimators, losses, provenance
from hista.cli import main
from hista.sveb.grad import estimator_credit, loss_weights, measure_prompt, part_sums, reference, reference_parts
from hista.sveb.grad_space import FullSpace, HeadSpace, Rows
from hista.sveb.grad_summary import summarise, table
from hista.sveb.presets import GradConfig

VOCAB, TAU = 16, 1.0


def small_model(tie=True):
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tie)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return LlamaForCausalLM(config).eval()


@torch.no_grad()
def sample_pool(model, prompt, n, length, gen):
    """n completions of ``length`` tokens at temperature TAU; reward 1 when the first token is even."""
    ids = torch.tensor([prompt] * n)
    for _ in range(length):
        probs = torch.softmax(model(input_ids=ids).logits[:, -1] / TAU, -1)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=gen)], 1)
    comps = ids[:, len(prompt):].tolist()
    return [{"completion_ids": c, "reward": float(c[0] % 2 == 0), "truncated": False} for c in comps]


def features(model, prompt, comps):
    with torch.no_grad():
        out = []
        for c in comps:
            h = model(input_ids=torch.tensor([prompt + c]), output_hidden_states=True).hidden_states[-1][0]
            out.append(h[len(prompt) - 1: len(prompt) - 1 + len(c)])
        return out


def token_logp(model, prompt, comp):
    logits = model(input_ids=torch.tensor([prompt + comp])).logits[0, len(prompt) - 1: len(prompt) + len(comp) - 1]
    return torch.log_softmax(logits / TAU, -1).gather(-1, torch.tensor(comp)[:, None])[:, 0]


def test_head_space_is_the_autograd_gradient_of_the_output_layer():
    model = small_model(tie=False)
    gen = torch.Generator().manual_seed(1)
    prompt = [1, 2, 3]
    rows = sample_pool(model, prompt, 3, 5, gen)
    comps = [r["completion_ids"] for r in rows]
    space = HeadSpace(model, Rows(prompt, comps, features(model, prompt, comps)), TAU)
    weights = {0: torch.tensor([0.5, -1.0, 2.0, 0.0, 0.3]), 2: torch.tensor([1.0, 1.0, -0.2, 0.7, 0.1])}
    total = sum((token_logp(model, prompt, comps[i]) * w).sum() for i, w in weights.items())
    want = torch.autograd.grad(total, model.lm_head.weight)[0].reshape(-1)
    assert torch.allclose(space.step(weights), want, atol=1e-5)
    gram = space.gram(list(weights))  # the norm without the step
    assert abs(space.norm(weights, gram) - float(want.norm())) < 1e-4 * float(want.norm())
    direction = torch.randn(want.shape, generator=gen)
    response = space.response([1], direction)[1]
    logp = token_logp(model, prompt, comps[1])
    per_token = torch.stack([torch.autograd.grad(logp[t], model.lm_head.weight, retain_graph=True)[0].reshape(-1)
                             @ direction for t in range(len(logp))])
    assert torch.allclose(response, per_token, atol=1e-4)
    for i, c in enumerate(comps):  # the log-probs the loss reads are the model's
        assert torch.allclose(space.logps[i], token_logp(model, prompt, c).detach(), atol=1e-5)


def test_full_space_agrees_with_the_head_space_on_the_output_layer():
    model = small_model(tie=False)
    gen = torch.Generator().manual_seed(3)
    prompt = [1, 5, 3]
    comps = [r["completion_ids"] for r in sample_pool(model, prompt, 2, 4, gen)]
    rows = Rows(prompt, comps, features(model, prompt, comps))
    head, full = HeadSpace(model, rows, TAU), FullSpace(model, rows, TAU)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    sizes = [p.numel() for p in model.parameters() if p.requires_grad]
    start = sum(sizes[: names.index("lm_head.weight")])
    weights = {0: torch.tensor([1.0, -0.5, 0.2, 0.0]), 1: torch.tensor([0.3, 0.3, -1.0, 2.0])}
    step = full.step(weights)
    assert torch.allclose(step[start: start + model.lm_head.weight.numel()], head.step(weights), atol=1e-5)
    direction = torch.zeros_like(step)
    direction[start: start + model.lm_head.weight.numel()] = torch.randn(model.lm_head.weight.numel(), generator=gen)
    assert torch.allclose(full.response([1], direction)[1],
                          head.response([1], direction[start: start + model.lm_head.weight.numel()])[1], atol=1e-4)


def test_reference_is_leave_one_out_reinforce():
    model = small_model()
    gen = torch.Generator().manual_seed(2)
    prompt = [1, 4, 3]
    rows = sample_pool(model, prompt, 6, 4, gen)
    comps = [r["completion_ids"] for r in rows]
    space = HeadSpace(model, Rows(prompt, comps, features(model, prompt, comps)), TAU)
    groups = [[0, 1], [2, 3], [4, 5]]
    rewards = [[rows[i]["reward"] for i in g] for g in groups]
    parts = reference_parts(space, rows, groups)
    got = reference(parts, rewards, [0, 2])
    assert torch.allclose(reference(parts, rewards, [0, 2], part_sums(parts, range(3))), got, atol=1e-6)
    members = [0, 1, 4, 5]
    r = torch.tensor([rows[i]["reward"] for i in members])
    want = sum((r[k] - (r.sum() - r[k]) / 3) * space.step({i: torch.ones(4)}) for k, i in enumerate(members)) / 4
    assert torch.allclose(got, want, atol=1e-6)


def test_loss_weights_of_dapo_are_the_advantages_over_the_token_count_and_skip_truncated_rows():
    loss = losses.get("dapo")
    logps = [torch.tensor([-1.0, -2.0, -0.5]), torch.tensor([-0.1, -3.0])]
    adv = [torch.tensor([1.0, 1.0, 1.0]), torch.tensor([-2.0, 0.5])]
    ent = [torch.zeros(3), torch.zeros(2)]
    w = loss_weights(loss, logps, adv, [True, True], ent)
    assert torch.allclose(torch.cat(w), torch.cat(adv) / 5)
    w = loss_weights(loss, logps, adv, [True, False], ent)
    assert torch.allclose(w[0], adv[0] / 3) and not w[1].any()


def _measure(prompts):
    """GRPO, exact Monte-Carlo credit and GRPO with the sign of the first half of every
    completion's tokens reversed, on the first-token-parity task."""
    model = small_model()
    gen = torch.Generator().manual_seed(0)
    config = GradConfig(temperature=TAU, groups=9, group_size=8)
    grpo, _ = estimator_credit(estimators.get("grpo"), None, 2)
    value = {}

    def exact(prompt, comps, rewards, hidden, keys):  # V(s_0) exactly; every later state's value is R
        return [torch.tensor([r - value["v"]] + [0.0] * (len(c) - 1)) for c, r in zip(comps, rewards)]

    def wrong(prompt, comps, rewards, hidden, keys):
        return [a * torch.tensor([-1.0 if t < len(a) // 2 else 1.0 for t in range(len(a))])
                for a in grpo(prompt, comps, rewards, hidden, keys)]

    credits = {"GRPO": (grpo, None), "exact MC": (exact, None), "reversed half": (wrong, None)}
    records = []
    for p in range(prompts):
        prompt = [1, 2 + p, 3]
        with torch.no_grad():
            first = torch.softmax(model(input_ids=torch.tensor([prompt])).logits[0, -1] / TAU, -1)
            value["v"] = float(first[0::2].sum())
        record = {"id": f"p{p}", "prompt_ids": prompt, "rows": sample_pool(model, prompt, 72, 6, gen)}
        records.append(measure_prompt(model, record, credits, config, losses.get("dapo"), baseline="GRPO"))
    return summarise(records, list(credits))


def test_exact_credit_scores_higher_and_reversed_credit_lower_than_grpo():
    prompts = 8
    summary = _measure(prompts)
    e = summary["estimators"]
    assert summary["prompts"] == prompts
    for metric in ("cosine", "adam"):
        assert e["exact MC"][metric]["diff"]["lo"] > 0, (metric, e)
        assert e["reversed half"][metric]["diff"]["hi"] < 0, (metric, e)
    assert e["exact MC"]["top_share"]["mean"] > e["GRPO"]["top_share"]["mean"]
    # the share of tokens whose credit is the estimator's own: none for GRPO itself; the reversed
    # half differs wherever GRPO's advantage is not near 0, on about half the tokens
    assert e["GRPO"]["differ"]["mean"] == 0
    assert 0.2 < e["reversed half"]["differ"]["mean"] <= 0.6 and e["exact MC"]["differ"]["mean"] > 0.2


GRAD = ["sveb", "grad", "--model", "tiny", "--tasks", "builtin:arith", "--problems", "2", "--groups", "3",
        "--group-size", "2", "--max-new-tokens", "5", "--methods", "grpo,numca,hista,probe"]


def test_command_runs_end_to_end_and_resumes(tmp_path, capsys):
    out = tmp_path / "grad"
    assert main(GRAD + ["--out", str(out)]) == 0
    assert "there is no step to measure" in capsys.readouterr().out  # the tiny model never answers
    pool = out / "pool.jsonl"
    records = [json.loads(line) for line in pool.read_text().splitlines()]
    assert len(records) == 2 and all(len(r["rows"]) == 6 for r in records)
    for r in records:  # give the rollouts mixed rewards, and measure again
        for k, row in enumerate(r["rows"]):
            row["reward"] = float(k % 2)
    pool.write_text("".join(json.dumps(r) + "\n" for r in records))
    (out / "steps.jsonl").unlink()
    assert main(GRAD + ["--out", str(out)]) == 0
    summary = json.loads((out / "grad.json").read_text())
    assert summary["prompts"] == 2 and summary["groups"] == 6
    assert set(summary["estimators"]) == {"GRPO", "Numca", "Hista", "Probe"}
    assert summary["code"] == provenance.code()  # the commit that measured it
    assert summary["estimators"]["GRPO"]["differ"]["mean"] == 0
    assert all(0 <= e["differ"]["mean"] <= 1 for e in summary["estimators"].values())
    steps = (out / "steps.jsonl").read_bytes()
    assert main(GRAD + ["--out", str(out)]) == 0  # a rerun resumes: nothing sampled or measured again
    assert (out / "steps.jsonl").read_bytes() == steps and pool.read_text().count("\n") == 2
    capsys.readouterr()
    assert main(GRAD + ["--out", str(out), "--groups", "4"]) == 2
    assert "other settings (groups)" in capsys.readouterr().err


def test_a_folder_with_rollouts_it_did_not_write_is_refused(tmp_path, capsys):
    out = tmp_path / "grad"
    out.mkdir()
    mine = out / "pool.jsonl"
    mine.write_text('{"id": "my own data"}\n')
    assert main(GRAD + ["--out", str(out)]) == 2
    assert "not an output of sveb grad" in capsys.readouterr().err
    assert mine.read_text() == '{"id": "my own data"}\n' and sorted(p.name for p in out.iterdir()) == ["pool.jsonl"]


def test_the_table_drops_adam_when_unmeasured_and_warns_of_a_noisy_reference():
    def records(split_half):
        step = {"cosine": 0.1, "top_share": 0.1, "norm": 1.0, "differ": 0.0}
        return [{"id": str(i), "split_half": split_half + 0.01 * i,
                 "steps": {"GRPO": [step], "X": [{**step, "cosine": 0.2, "differ": 0.5}]}} for i in range(4)]

    noisy, clear = (table(summarise(records(x), ["GRPO", "X"])) for x in (0.02, 0.4))
    assert "Adam" not in noisy and "| X | 0.2000" in noisy and "+0.1000" in noisy
    assert "mostly sampling noise" in noisy and "mostly sampling noise" not in clear


def test_a_prompts_credit_does_not_depend_on_the_prompts_before_it():
    """The probe keeps a history of recent batches in training; in the instrument every prompt
    starts from the estimator as built, so that a resumed measurement is exact."""
    model = small_model()
    probe, layer = estimator_credit(estimators.get("probe"), None, 2)
    gen = torch.Generator().manual_seed(1)

    def credit(p):
        prompt = [1, 2 + p, 3]
        rows = sample_pool(model, prompt, 12, 4, gen)
        comps, rewards = [r["completion_ids"] for r in rows], [r["reward"] for r in rows]
        with torch.no_grad():
            hidden = [model(input_ids=torch.tensor([prompt + c]), output_hidden_states=True).hidden_states[layer][0]
                      for c in comps]
        keys = [f"p{p}#{k // 4}" for k in range(12)]
        return lambda: probe(prompt, comps, rewards, {layer: hidden}, keys)

    first, second = credit(0), credit(1)
    alone = second()
    first()
    assert all(torch.equal(a, b) for a, b in zip(alone, second()))


def test_a_group_whose_reference_rollouts_all_earned_one_reward_is_not_measured():
    """Its leave-one-out reference is exactly 0: a cosine with it would read rounding noise."""
    model = small_model()
    prompt = [1, 2, 3]
    rows = sample_pool(model, prompt, 27, 4, torch.Generator().manual_seed(2))
    for i, row in enumerate(rows):  # group 0 mixed, groups 1 and 2 all correct
        row["reward"] = float(i % 2) if i < 9 else 1.0
    config = GradConfig(temperature=TAU, groups=3, group_size=9)
    grpo, _ = estimator_credit(estimators.get("grpo"), None, 2)
    record = measure_prompt(model, {"id": "p", "prompt_ids": prompt, "rows": rows}, {"GRPO": (grpo, None)}, config,
                            losses.get("dapo"))
    assert record["steps"]["GRPO"] == [None, None, None]
    assert record["split_half"] is None  # groups 1 and 2, one half, all earned 1: no split-half cosine
    space = HeadSpace(model, Rows(prompt, [r["completion_ids"] for r in rows], features(model, prompt,
                      [r["completion_ids"] for r in rows])), TAU)
    parts = reference_parts(space, rows, [list(range(k * 9, (k + 1) * 9)) for k in range(3)])
    rewards = [[r["reward"] for r in rows[k * 9:(k + 1) * 9]] for k in range(3)]
    assert not reference(parts, rewards, [1, 2]).any() and reference(parts, rewards, [0, 1]).any()


def test_a_recipe_gives_the_settings_its_run_would_use(tmp_path):
    """`sveb grad --recipe`: each setting the recipe leaves out is TRL's default, as in the run
    (the completion cap was 256 here while the run sampled 512 tokens)."""
    import argparse

    from trl import GRPOConfig

    from hista.cli.sveb import grad_config

    path = tmp_path / "recipe.yaml"
    path.write_text("model: tiny\ntasks: builtin:arith?steps=1\nloss: {name: cispo}\n"
                    "trl: {temperature: 0.9, bf16: false}\n")
    keys = ("model", "problems", "split", "groups", "group_size", "temperature", "max_new_tokens", "loss",
            "max_grad_norm", "params", "adam", "batch_size", "seed")
    config = grad_config(argparse.Namespace(recipe=str(path), tasks=None, **dict.fromkeys(keys)))
    trl = GRPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    assert (config.loss, config.temperature) == ("cispo", 0.9)
    assert (config.max_new_tokens, config.group_size, config.max_grad_norm, config.mask_truncated) == \
        (trl.max_completion_length, trl.num_generations, trl.max_grad_norm, trl.mask_truncated_completions)
