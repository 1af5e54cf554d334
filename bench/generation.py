"""Generation throughput of the rollout engine vs the model's forward (prefill) throughput.

    python bench/generation.py [--model smollm2-135m-instruct] [--new-tokens 32] [--batches 1,16,64]

For each batch size, in one run on one machine: tokens/s of hista's engine
(:func:`hista.rollout.engine.sample_continuations`, every row continuing the same prompt, as the
G rollouts of one problem do), tokens/s of transformers' ``generate`` (what the engine used
before), both with EOS ignored so that every row decodes ``--new-tokens`` tokens, and tokens/s
of one forward pass over prompt + completion (:func:`hista.models.forward`: hidden states and
log-probs of every token, as SVEB and training compute them). Ratios are engine / prefill and
engine / generate (SPEC §12). ``--continuous-batching`` adds a column for transformers'
continuous batching (``generate_batch`` on its paged CPU cache, oneDNN-packed linears as the
engine has them), a candidate the engine was measured against. Each figure is the best of
``--repeat`` runs (default 3), taken in turn, so that a slow moment of a shared machine hits
none of them alone. Run it with ``PYTHONPATH=OLD/src`` to measure an older checkout's library
with the same script.

``--distinct N`` measures evaluation-shaped work instead (SPEC §12): N distinct problems, one
completion each, through the engine's ``generate`` (chat template, batch of N, EOS ignored so
that every row decodes ``--new-tokens``), beside one forward pass over the same prompts and
completions. It prints the end-to-end tokens/s, the prefill of the prompts alone (one forward
pass with a cache, as the engine starts), the decode phase (end to end minus that prefill) and
both as shares of the forward pass's tokens/s. The prefill is the engine's own where it has
one to time (``hista.rollout.llama_decode.Decoder.fill``, or ``llama_decode.prefill`` in older
checkouts), else one forward pass over the prompts.
"""

from __future__ import annotations

import argparse
import inspect
import time

import torch
from arguments import POSITIVE, checked, comma_list, real

from hista.models import forward, load
from hista.rollout import prompt_ids
from hista.rollout.engine import sample_continuations


def _timed(fn, *args, **kwargs) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - start, out


def _best(runs: list[tuple[float, object]]) -> tuple[float, object]:
    return min(runs, key=lambda run: run[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--new-tokens", type=POSITIVE, default=32)
    ap.add_argument("--batches", type=comma_list(POSITIVE), default="1,16,64")
    ap.add_argument("--temperature", type=real(0.0, low_open=True), default=0.7,
                    help="sampling temperature, > 0 (transformers' generate samples)")
    ap.add_argument("--repeat", type=POSITIVE, default=3, help="runs per figure; the fastest counts")
    ap.add_argument("--continuous-batching", action="store_true",
                    help="also time transformers' generate_batch (continuous batching, paged cache)")
    ap.add_argument("--distinct", type=POSITIVE, default=None, metavar="N",
                    help="N distinct problems, one completion each, through the engine's generate")
    args = ap.parse_args()

    lm = checked(ap, load, args.model)
    if args.distinct:
        distinct(lm, args)
        return
    pad, n = lm.tokenizer.pad_token_id, args.new_tokens
    print(f"model {lm.name} on {lm.device}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    _, prompt = prompt_ids(lm, "Start with 7. Add 5. Then multiply by 2. What number do you get?")
    print(f"prompt {len(prompt)} tokens, {n} new tokens per row, temperature {args.temperature}\n")
    print(f"{'batch':>5s} {'engine tok/s':>13s} {'generate tok/s':>15s} {'prefill tok/s':>14s} "
          f"{'engine/prefill':>15s} {'engine/generate':>16s}{' cb tok/s' if args.continuous_batching else ''}")
    for batch in args.batches:
        def engine_run(batch=batch):
            if "seeds" in inspect.signature(sample_continuations).parameters:
                rng = {"seeds": list(range(batch))}
            else:  # an older checkout (PYTHONPATH=OLD/src): one generator per call
                rng = {"generator": torch.Generator(device=lm.device).manual_seed(0)}
            return sample_continuations(lm.model, [prompt], [0] * batch, max_new_tokens=n,
                                        temperature=args.temperature, top_p=1.0, eos=[], pad=pad,
                                        ignore_eos=True, **rng)

        ids = torch.tensor([prompt] * batch, device=lm.device)

        def generate_run(ids=ids):
            torch.manual_seed(0)
            with torch.no_grad():
                return lm.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                         temperature=args.temperature, top_k=0, max_new_tokens=n,
                                         min_new_tokens=n, pad_token_id=pad)

        def batching_run(batch=batch):
            from transformers.generation import ContinuousBatchingConfig, GenerationConfig

            from hista.models.packed import packed_linears  # imported here: older checkouts lack it

            # EOS is the last vocabulary id, which the model all but never samples, so rows decode n tokens;
            # the tokens are counted either way
            config = GenerationConfig(max_new_tokens=n, do_sample=True, temperature=args.temperature, top_k=0,
                                      top_p=1.0, eos_token_id=lm.model.config.vocab_size - 1, pad_token_id=pad)
            cache = ContinuousBatchingConfig(num_blocks=32, page_size=64, max_batch_tokens=1024,
                                             use_async_batching=False)
            with torch.no_grad(), packed_linears(lm.model):
                out = lm.model.generate_batch(inputs=[list(prompt)] * batch, generation_config=config,
                                              continuous_batching_config=cache, progress_bar=False)
            return sum(len(o.generated_tokens) for o in out.values())

        engine_runs, generate_runs, prefill_runs, batching_runs = [], [], [], []
        for _ in range(args.repeat):
            engine_runs.append(_timed(engine_run))
            generate_runs.append(_timed(generate_run))
            if args.continuous_batching:
                batching_runs.append(_timed(batching_run))
            rows = engine_runs[-1][1]
            prefill_runs.append(_timed(forward, lm, [prompt] * batch, [r[0] for r in rows],
                                       batch_size=min(batch, 16)))
        (engine_s, _), (generate_s, _), (prefill_s, _) = _best(engine_runs), _best(generate_runs), _best(prefill_runs)
        engine, generate = batch * n / engine_s, batch * n / generate_s
        prefill = batch * (len(prompt) + n) / prefill_s
        batching = ""
        if batching_runs:
            batching_s, tokens = _best(batching_runs)
            batching = f" {tokens / batching_s:9.1f}"
        print(f"{batch:5d} {engine:13.1f} {generate:15.1f} {prefill:14.1f} {engine / prefill:14.0%} "
              f"{engine / generate:15.2f}x{batching}", flush=True)


def distinct(lm, args) -> None:
    """``--distinct N``: N distinct problems through ``GenerateEngine.generate`` vs the forward pass."""
    import hista.rollout.engine as module
    from hista import tasks
    from hista.models.packed import packed_linears
    from hista.rollout import GenerateEngine, SamplingConfig

    problems = [p["problem"] for p in tasks.load("builtin:arith?steps=2", n=args.distinct, seed=0)]
    prompts = [prompt_ids(lm, p)[1] for p in problems]
    n = args.new_tokens
    engine = GenerateEngine(lm, SamplingConfig(temperature=args.temperature, max_new_tokens=n,
                                               batch_size=len(prompts)))
    print(f"model {lm.name} on {lm.device}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    print(f"{len(prompts)} distinct prompts of {min(map(len, prompts))}-{max(map(len, prompts))} tokens, {n} new "
          f"tokens per row (EOS ignored), temperature {args.temperature}\n")

    import hista.rollout.llama_decode as fast

    # the engine's own prefill, where it has one to time: Decoder.fill, or prefill in older checkouts
    owner = fast.Decoder if hasattr(getattr(fast, "Decoder", None), "fill") else fast
    name = "fill" if owner is not fast else "prefill"
    inside = getattr(owner, name, None)
    spent = [0.0]

    def timed_prefill(*a, **kw):
        start = time.perf_counter()
        try:
            return inside(*a, **kw)
        finally:
            spent[0] += time.perf_counter() - start

    def engine_run():
        original = module.eos_ids
        module.eos_ids = lambda lm: []  # every row decodes n tokens
        spent[0] = 0.0
        if inside:
            setattr(owner, name, timed_prefill)
        try:
            return engine.generate(problems, 1, seed=0)
        finally:
            module.eos_ids = original
            if inside:
                setattr(owner, name, inside)

    def prompt_prefill():  # what the engine does first: one forward pass over the prompts, with a cache
        width = max(map(len, prompts))
        ids = torch.tensor([[lm.tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        with torch.inference_mode(), packed_linears(lm.model):
            lm.model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                     use_cache=True, logits_to_keep=1)

    runs, forward_runs = [], []
    for _ in range(args.repeat):  # in turn, so that a slow moment of a shared machine hits no figure alone
        engine_s, groups = _timed(engine_run)
        prompt_s = spent[0] if inside else _timed(prompt_prefill)[0]
        runs.append((engine_s, prompt_s, groups))
        forward_runs.append(_timed(forward, lm, prompts, [g[0].completion_ids for g in groups], batch_size=16))
    engine_s, prompt_s, groups = min(runs, key=lambda r: r[0])
    forward_s = min(prompt for prompt, _ in forward_runs)
    tokens = sum(len(g[0].completion_ids) for g in groups)
    forward_tps = sum(len(p) + n for p in prompts) / forward_s
    e2e, decode = tokens / engine_s, tokens / max(engine_s - prompt_s, 1e-9)
    print(f"{'engine e2e tok/s':>17s} {'prompt prefill s':>17s} {'decode tok/s':>13s} {'forward tok/s':>14s} "
          f"{'e2e/forward':>12s} {'decode/forward':>15s}")
    print(f"{e2e:17.1f} {prompt_s:17.2f} {decode:13.1f} {forward_tps:14.1f} {e2e / forward_tps:11.0%} "
          f"{decode / forward_tps:14.0%}", flush=True)


if __name__ == "__main__":
    main()
