"""Task source ``hf:NAME[:CONFIG][@SPLIT]``: Hugging Face datasets by name.

Needs the optional ``datasets`` library (``pip install 'hista[hf]'``), imported only here and
only when such a spec is loaded.  Known datasets (with short aliases) get a dedicated row
mapping; any other dataset (a hub id ``owner/name`` or a local dataset folder) is mapped
generically when it has a ``problem`` or ``question`` column and an ``answer`` column, or the
columns of HumanEval(+) (``prompt``, ``test``, ``entry_point``) or MBPP+ (``prompt``, ``code``,
``test_list``), whose rows become ``python-tests`` problems (function-call tests in the sandbox).

Network: before loading, the hub endpoint (``HF_ENDPOINT``, default https://huggingface.co) is
probed with a short timeout (``HISTA_HF_TIMEOUT`` seconds, default 5; :mod:`hista.hub`, shared
with model loading).  When it cannot be
reached, or ``HF_HUB_OFFLINE=1`` is set, the dataset is loaded in offline mode (from the local
cache only), so a missing dataset fails in about a second with an InputError instead of
minutes of retries.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

from hista import hub
from hista.errors import InputError
from hista.tasks.base import TaskSource, register

# ---------------------------------------------------------------------------------------------
# Row mappings: dataset row -> (problem, answer, field, extra meta) or None to skip the row.

def _gsm8k(row: dict) -> Optional[tuple[str, str, str, dict]]:
    solution = str(row.get("answer", ""))
    if "####" not in solution:
        return None
    answer = solution.rsplit("####", 1)[1].strip().replace(",", "")
    return str(row["question"]), answer, "gsm8k", {"solution": solution}


def _math500(row: dict) -> Optional[tuple[str, str, str, dict]]:
    meta = {k: row[k] for k in ("level", "unique_id", "solution") if k in row}
    return str(row["problem"]), str(row["answer"]), str(row.get("subject") or "math"), meta


DAPO_PREFIX = ("Solve the following math problem step by step. The last line of your "
                "response should be of the form Answer: $Answer (without quotes) where $Answer "
                "is the answer to the problem.")
DAPO_SUFFIX = 'Remember to put your answer on its own line after "Answer:".'


def math_record(row: dict) -> Optional[tuple[str, str, str, dict]]:
    """(problem, answer, field, meta) of a MATH row: the answer is the solution's last
    ``\boxed{}``; None when the row has no problem or no boxed answer."""
    from hista.rewards.math import last_boxed

    answer = last_boxed(str(row.get("solution", "")))
    if not row.get("problem") or not answer:
        return None
    meta = {k: row[k] for k in ("level", "solution") if k in row}
    return str(row["problem"]), answer, str(row.get("type") or "math"), meta


def _dapo(row: dict) -> Optional[tuple[str, str, str, dict]]:
    prompt = row.get("prompt")
    if isinstance(prompt, list):
        text = "\n\n".join(str(m.get("content", "")) for m in prompt
                           if isinstance(m, dict) and m.get("role", "user") == "user")
    else:
        text = str(prompt or "")
    text = text.strip()
    if text.startswith(DAPO_PREFIX):
        text = text[len(DAPO_PREFIX):].strip()
    if text.endswith(DAPO_SUFFIX):
        text = text[: -len(DAPO_SUFFIX)].strip()
    answer = (row.get("reward_model") or {}).get("ground_truth")
    if not text or answer is None:
        return None
    meta = {}
    extra = row.get("extra_info")
    if isinstance(extra, dict) and "index" in extra:
        meta["source_index"] = extra["index"]
    return text, str(answer), "dapo-math", meta


def _openr1(row: dict) -> Optional[tuple[str, str, str, dict]]:
    answer = row.get("answer")
    if not row.get("problem") or answer in (None, ""):
        return None
    meta = {k: row[k] for k in ("uuid", "source", "question_type") if k in row}
    return str(row["problem"]), str(answer), str(row.get("problem_type") or "math"), meta


def olympiad_record(row: dict) -> Optional[tuple[str, str, str, dict]]:
    """(problem, answer, field, meta) of an OlympiadBench row as math-ai/olympiadbench holds it:
    ``question`` and a list ``final_answer`` (several answers are joined by ", ", as
    a tuple); None without a question or an answer."""
    answers = row.get("final_answer")
    answers = [str(a).strip() for a in (answers if isinstance(answers, list) else [answers]) if a is not None]
    answers = [a for a in answers if a]
    if not row.get("question") or not answers:
        return None
    meta = {k: row[k] for k in ("id", "answer_type", "unit", "subfield") if k in row}
    return str(row["question"]), ", ".join(answers), str(row.get("subfield") or "olympiad"), meta


def function_tests_record(row: dict) -> Optional[tuple[str, str, str, dict, str]]:
    """(problem, answer, field, meta, verifier) of a HumanEval-layout row: HumanEval+ as
    evalplus/humanevalplus holds it (``prompt``, ``test`` defining ``check``, ``entry_point``), for
    the ``python-tests`` verifier; None without a prompt or an entry point. A row without test
    code (``test`` null, empty, blank or not a string) raises an InputError about ``test``
    (:func:`hista.tasks.humaneval.test_code`)."""
    from hista.tasks.humaneval import problem_text, test_code

    if not row.get("prompt") or not row.get("entry_point"):
        return None
    answer = {"prompt": str(row["prompt"]), "test": test_code(row.get("test")),
              "entry_point": str(row["entry_point"])}
    meta = {"task_id": row.get("task_id")}
    return problem_text(answer["prompt"]), json.dumps(answer, ensure_ascii=False), "code", meta, "python-tests"


def mbpp_record(row: dict) -> Optional[tuple[str, str, str, dict, str]]:
    """(problem, answer, field, meta, verifier) of an MBPP+ row as evalplus/mbppplus holds it:
    the task ``prompt``, its first assert as the example the model sees (MBPP's own prompt
    format), the function it names (from the reference ``code``) as the entry point, and the
    ``test_imports`` and ``test`` code (top-level asserts over the plus inputs) as the tests,
    the ``test_list`` asserts when ``test`` is null or empty; for the ``python-tests`` verifier.
    None when no function of ``code`` is called by the first assert; a ``test`` that is neither
    null nor a string raises an InputError about ``test``."""
    from hista.tasks.humaneval import test_code

    if row.get("test") not in (None, ""):
        test_code(row["test"])
    asserts = [str(t) for t in (row.get("test_list") or [])]
    names = re.findall(r"^def\s+([A-Za-z_][A-Za-z0-9_]*)\s*\(", str(row.get("code") or ""), re.M)
    called = [n for n in names if asserts and re.search(rf"\b{n}\s*\(", asserts[0])]
    if not row.get("prompt") or not called:
        return None
    test = "\n".join([*map(str, row.get("test_imports") or []), str(row.get("test") or "\n".join(asserts))])
    problem = (f"{str(row['prompt']).strip()}\nYour code should pass this test:\n{asserts[0]}\n\nWrite the function in "
               "one ```python code block.")
    answer = {"prompt": "", "test": test, "entry_point": called[0]}
    meta = {"task_id": row.get("task_id")}
    return problem, json.dumps(answer, ensure_ascii=False), "code", meta, "python-tests"


def _generic(row: dict) -> Optional[tuple]:
    if "entry_point" in row and "prompt" in row and "test" in row:  # a folder in HumanEval(+)'s layout
        return function_tests_record(row)
    if "test_list" in row and "code" in row and "prompt" in row:  # a folder in MBPP+'s layout
        return mbpp_record(row)
    problem = row.get("problem", row.get("question"))
    answer = row.get("answer")
    if problem in (None, "") or answer is None:
        return None
    field = row.get("subject") or row.get("category") or row.get("type") or "default"
    return str(problem), str(answer), str(field), {}


@dataclass(frozen=True)
class HFDataset:
    """How one known dataset is read."""

    name: str
    short: str
    aliases: tuple[str, ...]
    config: Optional[str]
    splits: tuple[str, ...]
    mapper: Callable[[dict], Optional[tuple]]
    dedupe: bool = False


DATASETS = [
    HFDataset("openai/gsm8k", "gsm8k", ("gsm8k",), "main", ("train", "test"), _gsm8k),
    HFDataset("HuggingFaceH4/MATH-500", "math500", ("math500", "math-500"), None, ("test",),
              _math500),
    # Hendrycks MATH (7.5k train / 5k test); the answer is the last \boxed{} of the solution.
    HFDataset("DigitalLearningGmbH/MATH-lighteval", "math", ("math", "hendrycks-math"), "default",
              ("train", "test"), math_record),
    # The hub copy repeats each of its ~17k problems many times: keep the first of each.
    HFDataset("BytedTsinghua-SIA/DAPO-Math-17k", "dapo-math", ("dapo-math", "dapo"), None,
              ("train",), _dapo, dedupe=True),
    HFDataset("open-r1/OpenR1-Math-220k", "openr1-math", ("openr1-math",), "default",
              ("train",), _openr1),
    # OlympiadBench, the text-only English math problems (the paper's evaluation).
    HFDataset("math-ai/olympiadbench", "olympiadbench", ("olympiadbench",), None, ("test",), olympiad_record),
    # The paper's code benchmarks (Table 6): function-call tests in hista's sandbox.
    HFDataset("evalplus/humanevalplus", "humanevalplus", ("humanevalplus", "humaneval+"), None, ("test",),
              function_tests_record),
    HFDataset("evalplus/mbppplus", "mbppplus", ("mbppplus", "mbpp+"), None, ("test",), mbpp_record),
]
#: a dataset by its hub name (lower case) or any alias
BY_NAME = {}
for _d in DATASETS:
    BY_NAME[_d.name.lower()] = _d
    for _a in _d.aliases:
        BY_NAME[_a] = _d


def supported() -> list[str]:
    """Names of the datasets with a dedicated mapping, with their aliases."""
    return [f"{d.name} ({', '.join(d.aliases)})" for d in DATASETS]


def parse_spec(rest: str) -> tuple[str, Optional[str], Optional[str]]:
    """Split ``NAME[:CONFIG][@SPLIT]`` (the part after ``hf:``) into its parts."""
    split = None
    if "@" in rest:
        rest, split = rest.rsplit("@", 1)
        if not split:
            raise InputError("hf: empty split after '@'", field="split")
    config = None
    if ":" in rest:
        rest, config = rest.split(":", 1)
        if not config:
            raise InputError("hf: empty config after ':'", field="config")
    if not rest:
        raise InputError(
            "hf: needs a dataset name, e.g. hf:gsm8k or hf:openai/gsm8k:main@test; supported: "
            + "; ".join(supported()), field="spec")
    return rest, config, split


@contextlib.contextmanager
def _offline_mode(datasets_module: Any) -> Iterator[None]:
    """Force the hub libraries into offline mode (cache only) for the duration."""
    patched = []
    try:
        import huggingface_hub.constants as hub_constants  # type: ignore
        patched.append((hub_constants, "HF_HUB_OFFLINE"))
    except Exception:  # noqa: BLE001
        pass
    cfg = getattr(datasets_module, "config", None)
    if cfg is not None:
        patched += [(cfg, "HF_HUB_OFFLINE"), (cfg, "HF_DATASETS_OFFLINE")]
    saved = [(obj, attr, getattr(obj, attr)) for obj, attr in patched if hasattr(obj, attr)]
    try:
        for obj, attr, _ in saved:
            setattr(obj, attr, True)
        yield
    finally:
        for obj, attr, value in saved:
            setattr(obj, attr, value)


def _import_datasets() -> Any:
    try:
        import datasets  # type: ignore
    except ImportError:
        raise InputError(
            "hf: datasets need the optional 'datasets' library: pip install 'hista[hf]' "
            "(or use jsonl:PATH with a local file)", field="spec") from None
    return datasets


class HubUnreachable(Exception):
    """The hub could not be reached and the dataset is not in the local cache."""


def load_rows(name: str, config: Optional[str], split: str) -> Iterable[dict]:
    """One split of a hub dataset as an iterable of row dicts (the local cache only
    when the hub is unreachable or offline mode is set). The one place rows come from the hub."""
    datasets = _import_datasets()
    offline = hub.offline()
    ctx = _offline_mode(datasets) if offline else contextlib.nullcontext()
    try:
        with ctx:
            return datasets.load_dataset(name, config, split=split)
    except ConnectionError as exc:
        raise HubUnreachable(str(exc)) from None
    except Exception as exc:  # noqa: BLE001
        if offline and type(exc).__name__ in ("DatasetNotFoundError", "FileNotFoundError",
                                              "OfflineModeIsEnabled", "LocalEntryNotFoundError"):
            raise HubUnreachable(str(exc)) from None
        raise


def _numbered(rows: Iterable[dict], spec: str) -> Iterator[tuple[int, dict]]:
    """(number, row as a dict) of each row of a loaded split: a row whose text is
    not UTF-8 (a local folder's file holding other bytes, which the datasets library decodes only
    as it hands the row out) raises an InputError naming the spec and the row."""
    rows = iter(rows)
    number = 0
    while True:
        try:
            row = next(rows)
        except StopIteration:
            return
        except UnicodeDecodeError as exc:
            raise InputError(f"{spec}: row {number} is not UTF-8 text ({exc.reason}: byte "
                             f"{exc.object[exc.start]:#04x}); convert the dataset's files to UTF-8",
                             field="spec") from None
        yield number, dict(row)
        number += 1


# ---------------------------------------------------------------------------------------------

def read(rest: str, n: Optional[int] = None, split: str = "test") -> list[dict]:
    """Load ``hf:NAME[:CONFIG][@SPLIT]`` as problem records; the first ``n`` rows.

    The split is ``@SPLIT`` when given, else ``split``; a known dataset that has a single
    split (MATH-500: test, DAPO-Math-17k and OpenR1-Math-220k: train) uses it.  Ids are
    ``<short name>-<split>-<row>``.
    """
    source = _resolve(rest, split)
    rows = _load(source)
    records: list[dict] = []
    seen: set[str] = set()
    for i, row in _numbered(rows, source.spec):
        if n is not None and len(records) >= n:
            break
        mapped = _map(source, i, row)
        if mapped is None:
            continue
        problem, answer, field, meta, verifier = (*mapped, "math")[:5]  # a code mapping names its verifier
        if source.known is not None and source.known.dedupe:
            if problem in seen:
                continue
            seen.add(problem)
        meta = {"source": f"hf:{source.hub_name}", "split": source.split, "row": i, **meta}
        records.append({"id": f"{source.short}-{source.split}-{i:05d}", "problem": problem,
                        "answer": answer, "verifier": verifier, "field": field, "meta": meta})
    return records


@dataclass(frozen=True)
class _Source:
    """What one ``hf:`` spec reads: the dataset on the hub (its dedicated entry, when known), its
    config and split, the short name of its ids and its row mapping."""

    spec: str
    known: Optional[HFDataset]
    hub_name: str
    short: str
    config: Optional[str]
    split: str
    mapper: Callable[[dict], Optional[tuple]]


def _resolve(rest: str, split: str) -> _Source:
    """The dataset, config and split that ``hf:REST`` names, ``split`` unless the spec gives one
    or the known dataset has a single split."""
    name, config, spec_split = parse_spec(rest)
    known = BY_NAME.get(name.lower())
    if known is None:
        short = re.sub(r"[^A-Za-z0-9._-]+", "-", name.split("/")[-1]).lower()
        return _Source(f"hf:{rest}", None, name, short, config, spec_split or split, _generic)
    if spec_split:
        use_split = spec_split
    elif split in known.splits or len(known.splits) != 1:
        use_split = split
    else:
        use_split = known.splits[0]
    return _Source(f"hf:{rest}", known, known.name, known.short, config or known.config, use_split, known.mapper)


def _load(source: _Source) -> Iterable[dict]:
    """The rows of the split, any failure to load them an InputError that names the spec and
    says what to do."""
    try:
        return load_rows(source.hub_name, source.config, source.split)
    except HubUnreachable as exc:
        raise InputError(
            f"{source.spec}: could not reach the Hugging Face Hub ({hub.endpoint()}) and {source.hub_name!r} "
            f"is not in the local cache ({exc}). Run where the hub is reachable (once, to fill "
            f"the cache), or export the problems to a file and use jsonl:PATH.",
            field="spec") from None
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001
        kind = type(exc).__name__
        hint = "" if source.known else " Supported datasets: " + "; ".join(supported()) + "."
        raise InputError(f"{source.spec}: could not load {source.hub_name!r} (config {source.config!r}, split "
                         f"{source.split!r}): {kind}: {exc}.{hint}", field="spec") from None


def _map(source: _Source, i: int, row: dict) -> Optional[tuple]:
    """Row ``i`` through the dataset's mapping; None for a row it skips. An InputError names the
    row that the mapping refuses or that lacks a column, or, at the first row of an unknown
    dataset, the columns a generic mapping needs."""
    spec, hub_name, known = source.spec, source.hub_name, source.known
    try:
        mapped = source.mapper(row)
    except InputError as exc:  # a row the mapping refuses (a code problem without tests)
        raise InputError(f"{spec}: row {i}: {exc.message}", field=exc.field) from None
    except KeyError as exc:
        if known is None and i == 0:
            raise InputError(
                f"{spec}: no mapping for {hub_name!r}: it needs a problem or question "
                f"column and an answer column (missing {exc}). Supported datasets: "
                + "; ".join(supported()), field="spec") from None
        raise InputError(f"{spec}: row {i} lacks column {exc}", field=str(exc)) from None
    if mapped is None and known is None and i == 0 and not (
            ("problem" in row or "question" in row) and "answer" in row):
        raise InputError(
            f"{spec}: no mapping for {hub_name!r}: it needs a problem or question "
            f"column and an answer column (columns: {', '.join(map(str, row))}). "
            "Supported datasets: " + "; ".join(supported()), field="spec")
    return mapped


@register("hf")
class HFSource(TaskSource):
    """``hf:NAME[:CONFIG][@SPLIT]``: a Hugging Face dataset; see the module docstring."""

    description = "a Hugging Face dataset by supported name, owner/name id or local folder, hf:NAME[:CONFIG][@SPLIT]"

    def load(self, rest: str, n: Optional[int] = None, seed: int = 0, split: str = "test") -> list[dict]:
        """The first ``n`` problems (default all) of split ``@SPLIT``, else ``split``; ``seed``
        does not apply."""
        return read(rest, n, split)

    def check(self, rest: str) -> None:
        """The spec must parse and name a supported dataset or an ``owner/name`` id."""
        name, _, _ = parse_spec(rest)
        if name.lower() not in BY_NAME and "/" not in name:
            raise InputError(f"unknown dataset {name!r} in 'hf:{rest}': not a supported name nor an owner/name "
                             f"id; supported: {'; '.join(supported())}", field="spec")

    def example(self, tmp_dir: Path) -> str:
        """A local dataset folder of three problems under ``tmp_dir``, split ``train``, which
        ``datasets.load_dataset`` reads offline."""
        if importlib.util.find_spec("datasets") is None:
            raise NotImplementedError("hf: needs the optional 'datasets' library (pip install 'hista[hf]')")
        folder = Path(tmp_dir) / "tiny"
        folder.mkdir(parents=True, exist_ok=True)
        rows = [{"problem": f"What is {a} + {a}?", "answer": str(2 * a), "subject": "addition"} for a in (1, 2, 3)]
        (folder / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        return f"{folder}@train"
