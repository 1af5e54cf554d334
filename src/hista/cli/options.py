"""Option types and option groups that several ``hista`` commands share: the one way a
command's parser is made, numbers in a range, choices and lists, a device this machine has, the
sampling and engine options, and the model and engine they load. A value out of range is a usage
error naming the option (exit 2). Nothing here imports torch until a command runs."""

from __future__ import annotations

import argparse
import math
import time
from typing import Optional

from ..errors import InputError
from ..rollout.config import SamplingConfig


def add_command(sub: argparse._SubParsersAction, name: str, help: str,
                description: Optional[str] = None) -> argparse.ArgumentParser:
    """A command's parser with its line in the parent's ``--help``; every parser below ``hista`` is made here."""
    return sub.add_parser(name, help=help, description=description)


def number(kind: type, lo: float, hi: float = math.inf, *, lo_open: bool = False, what: str = ""):
    """An argparse type: a ``kind`` number in [lo, hi] (or (lo, hi] with ``lo_open``); a value
    outside is a usage error naming the option (exit 2)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        inside = (lo < value if lo_open else lo <= value) and value <= hi and math.isfinite(value)
        if not inside:
            raise argparse.ArgumentTypeError(f"{text!r} is out of range: {what}")
        return value

    return parse


POSITIVE = number(int, 1, what="must be an integer >= 1")
AT_LEAST_2 = number(int, 2, what="must be an integer >= 2 (a group needs two rollouts)")
SEED = number(int, 0, 2**32 - 1, what="must be an integer in [0, 2^32 - 1]")
FRACTION = number(float, 0.0, 1.0, what="must lie in [0, 1]")
#: the share of problems a selection half holds (sveb sweep and split)
#: the share of the problems a selection part holds (sveb sweep and sveb split)
SELECT_ON = number(float, 0.0, 1.0, lo_open=True, what="must lie in (0, 1)")
TOP_P = number(float, 0.0, 1.0, lo_open=True, what="must lie in (0, 1]")
TEMPERATURE = number(float, 0.0, what="must be a finite number >= 0 (0 = greedy)")


def layers(text: str) -> Optional[int]:
    """An argparse type: ``all`` (None) or a number of decoder layers >= 0 (SPEC §4.5)."""
    if text.strip().lower() == "all":
        return None
    return number(int, 0, what="must be 'all' or an integer >= 0")(text)


def choice(*valid: str):
    """An argparse type: one of ``valid``."""

    def parse(text: str) -> str:
        if text not in valid:
            raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(valid)}")
        return text

    return parse


def list_of(item):
    """An argparse type: a comma list of ``item`` values, without repeats."""

    def parse(text: str) -> list:
        values = [item(part.strip()) for part in text.split(",")]
        if len(set(values)) != len(values):
            raise argparse.ArgumentTypeError(f"{text!r} names a value twice")
        return values

    return parse


def device(text: str) -> str:
    """An argparse type: a torch device this machine has."""
    from ..models import check_device

    try:
        return check_device(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def add_sampling_options(p: argparse.ArgumentParser) -> None:
    """``--model``, ``--device``, the sampling settings and the engine options of a command that
    samples: ``sample`` and ``tasks filter``."""
    d = SamplingConfig()
    p.add_argument("--model", default="smollm2-135m-instruct",
                   help="alias (smollm2-135m-instruct, tiny), local path or Hugging Face id (default: %(default)s)")
    p.add_argument("--device", type=device, default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--temperature", type=TEMPERATURE, default=d.temperature,
                   help="sampling temperature, 0 = greedy (default: %(default)s)")
    p.add_argument("--top-p", type=TOP_P, default=d.top_p, help="nucleus sampling threshold (default: %(default)s)")
    p.add_argument("--max-new-tokens", type=POSITIVE, default=d.max_new_tokens,
                   help="completion length cap (default: %(default)s)")
    p.add_argument("--batch-size", type=POSITIVE, default=d.batch_size,
                   help="sequences per generate call (default: %(default)s)")
    p.add_argument("--seed", type=SEED, default=0, help="random seed: same seed, same samples (default: %(default)s)")
    add_engine_options(p, "hf")


def add_engine_options(p: argparse.ArgumentParser, default: Optional[str]) -> None:
    """``--engine`` and ``--tensor-parallel-size``; ``default`` None leaves them to a
    preset."""
    shown = default or "the preset's, hf"
    p.add_argument("--engine", choices=["hf", "vllm"], default=default,
                   help="rollout engine: hf (transformers, CPU or GPU) or vllm (GPU; pip install 'hista[vllm]'; "
                        f"top-p 1 only; not yet run on a GPU, see docs/engines.md) (default: {shown})")
    p.add_argument("--tensor-parallel-size", type=POSITIVE, default=None if default is None else 1,
                   help="GPUs the vllm engine splits the model over (default: 1)")


def sampling_config(args: argparse.Namespace) -> SamplingConfig:
    """The :class:`~hista.rollout.config.SamplingConfig` of a command's sampling options."""
    return SamplingConfig(temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens,
                          batch_size=args.batch_size)


def sampler(args: argparse.Namespace, config: SamplingConfig):
    """The model and engine of ``--model``, ``--engine``, ``--tensor-parallel-size`` and
    ``--device``, printing what loaded and how long it took."""
    from ..rollout.engines import load_model, make_engine

    start = time.time()
    lm = load_model(args.engine, args.model, device=args.device)
    engine = make_engine(args.engine, lm, config, tensor_parallel_size=args.tensor_parallel_size)
    where = f"on {lm.device}" if args.engine == "hf" else f"in vLLM ({engine.identity()['vllm']})"
    print(f"model {lm.name} ({lm.revision}) loaded in {time.time() - start:.1f}s {where}")
    return lm, engine
