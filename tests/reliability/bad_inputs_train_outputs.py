"""Bad inputs of issue 62 (reliability, fourth pass) to ``hista train``: runs that cut or
replaced files that are not their own output (a refused ``--overwrite`` run emptied the earlier
run's ``pool/``, a fresh refused run left ``pool/settings.json`` behind, a task file in
``OUTPUT_DIR/pool/`` was overwritten, a user's ``README.md`` in ``output_dir`` was replaced by
TRL's model card), and recipe values the dry run accepted that a run cannot use (unbounded
``dynamic_sampling.max_rounds``, ``pool_filter.samples`` and ``pool_filter.seed``,
``pool_filter.max_new_tokens`` past the model's context, a ``gym:`` task that cannot supply
``problems`` problems). Each exits 2 with a located message and changes or creates no file
(tests/reliability/test_bad_inputs.py); the earlier run's pool survives a run that fails later
than these checks too (tests/train/test_pool.py)."""

from __future__ import annotations

import importlib.util

from bad_inputs import RECIPE, Case

DRY = ["train", "recipe.yaml"]  # overrides follow, then "--dry-run"
TASKS = b"".join(b'{"id": "q%d", "problem": "What is %d + 1?", "answer": "%d"}\n' % (i, i, i + 1) for i in range(4))
#: an earlier run in run/: its metrics, a checkpoint and the pool it measured (other settings than the cases')
EARLIER = {"run/metrics.jsonl": b'{"step": 1, "loss": 0.5}\n',
           "run/checkpoint-1/trainer_state.json": b'{"global_step": 1}\n',
           "run/pool/settings.json": b'{"model": "tiny", "samples": 2}\n',
           "run/pool/accuracy.jsonl": b'{"task": "builtin:arith?steps=1", "id": "a", "accuracy": 0.5}\n',
           "run/pool/pool.jsonl": b'{"task": "builtin:arith?steps=1", "id": "a", "accuracy": 0.5}\n'}
POOL_PAST_CONTEXT = "pool_filter={samples: 2, band: [0, 1], max_new_tokens: 1000000000}"
#: fits the context of the tiny model (4096) alone, not with a prompt
POOL_PAST_PROMPTS = "pool_filter={samples: 2, band: [0, 1], max_new_tokens: 4090}"


def cases() -> list[Case]:
    recipe = {"recipe.yaml": RECIPE.encode()}
    gym = importlib.util.find_spec("reasoning_gym") is not None
    return [
        # F8: a refused run changes no byte of the earlier run's pool, and a fresh one writes none
        Case("62 F8 train --overwrite, pool cap past the context: the earlier pool stays",
             [*DRY, "--overwrite", POOL_PAST_CONTEXT], ("pool_filter.max_new_tokens", "4096"), {**recipe, **EARLIER}),
        Case("62 F8 train, pool cap past the context: no pool/ written", [*DRY, POOL_PAST_CONTEXT],
             ("pool_filter.max_new_tokens", "4096"), recipe),
        Case("62 F8 train --overwrite, prompt + pool cap past the context (as tasks filter refuses it)",
             [*DRY, "--overwrite", POOL_PAST_PROMPTS], ("pool_filter.max_new_tokens", "4090", "tasks"),
             {**recipe, **EARLIER}),
        # F14: a README.md that is not TRL's model card
        Case("62 F14 train, a user's README.md in output_dir", DRY, ("README.md", "output_dir", "model card"),
             {**recipe, "run/README.md": b"# My project\n\nnotes\n"}),
        Case("62 F14 train --dry-run, a user's README.md in output_dir", [*DRY, "--dry-run"],
             ("README.md", "output_dir"), {**recipe, "run/README.md": b"# My project\n\nnotes\n"}),
        # F15: a task file inside the run's own folders
        Case("62 F15 train, task file at OUTPUT_DIR/pool/accuracy.jsonl",
             [*DRY, "problems=null", "tasks=jsonl:run/pool/accuracy.jsonl", "pool_filter={samples: 2, band: [0, 1]}"],
             ("run/pool/accuracy.jsonl", "output_dir"), {**recipe, "run/pool/accuracy.jsonl": TASKS}),
        Case("62 F15 train --overwrite, task file in OUTPUT_DIR/final/",
             [*DRY, "--overwrite", "problems=null", "tasks=jsonl:run/final/t.jsonl"],
             ("run/final/t.jsonl", "output_dir"), {**recipe, "run/final/t.jsonl": TASKS}),
        # F16: values the dry run accepted that a run cannot use
        Case("62 F16 dynamic_sampling.max_rounds 10^20",
             [*DRY, "dynamic_sampling={max_rounds: 100000000000000000000}", "--dry-run"],
             ("dynamic_sampling", "max_rounds", "1000"), recipe),
        Case("62 F16 pool_filter.samples 10^14", [*DRY, "pool_filter={samples: 100000000000000}", "--dry-run"],
             ("pool_filter", "samples", "1024"), recipe),
        Case("62 F16 pool_filter.seed 10^21", [*DRY, "pool_filter={seed: 1000000000000000000000}", "--dry-run"],
             ("pool_filter", "seed"), recipe),
        Case("62 F16 pool_filter.max_new_tokens 10^9 (dry run)", [*DRY, POOL_PAST_CONTEXT, "--dry-run"],
             ("pool_filter.max_new_tokens", "4096"), recipe),
        *([Case("62 F16 gym:count_bits?max_n=3 with problems 64 (dry run)",
                [*DRY, "problems=64", "tasks=gym:count_bits?max_n=3", "--dry-run"],
                ("tasks", "count_bits", "could not draw problem"), recipe)] if gym else []),
    ]
