r"""Code verifiers: ``code`` runs the completion's program on stdin/stdout test cases;
``python-tests`` calls the completion's function with a problem's own test code (HumanEval's
layout, see :func:`verify_python_tests`).

The gold ``answer`` is a JSON string (or the already-decoded value): a list of
``{"input": str, "output": str}`` cases; the ``{"inputs": [...], "outputs": [...]}`` layout
of APPS/TACO-style datasets is accepted too.  The program is the completion's last
```` ```python ```` (also ``py``/``python3``) fenced block, else its last fenced block of any
language; an unclosed final fence is ignored.  Each case runs once in the sandbox of
``hista.rewards.sandbox`` (never in this process); the reward is 1.0 only if every case
exits with status 0 and prints the expected output, compared line by line with trailing
whitespace stripped and trailing blank lines ignored.  Evaluation stops at the first
failing case.  A malformed ``answer`` is the dataset's fault but still gives 0.0 with a
reason, so a training run never crashes on it.

Reason strings go into evaluation results, so they carry the verdict and at most one short,
sanitised excerpt of what the program printed: the first differing line of stdout (wrong
output) or the last non-empty line of stderr (runtime error), cut to ``EXCERPT_CHARS`` (80)
characters *after* escaping -- every character outside printable ASCII, and the backslash,
is written as a Python escape (``\x1b``, ``\r``, ``\x00``, ``\u202e``), and a cut excerpt
ends in ``...``.  A reason about a run is therefore printable ASCII and at most ~200
characters long, e.g. ``wrong output on case 2/3: got '12' (line 4; got 5 lines,
expected 5)``, ``wrong output on case 1/1: output ends after 0 of 1 lines``, ``runtime error on
case 1/2 (exit status 1): ZeroDivisionError: division by zero``.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import re
import textwrap
from pathlib import Path
from typing import Any, Optional

from . import boundary, register
from .sandbox import SandboxUnavailable, run_judged, run_sandboxed

__all__ = ["assemble_function", "extract_code", "outputs_match", "parse_cases", "parse_function_tests",
           "verify_code", "verify_python_tests"]

logger = logging.getLogger(__name__)

_PYTHON_TAGS = {"python", "py", "python3", "py3"}
MAX_CASES = 100
#: longest excerpt of program output in a reason string, counted after escaping.
EXCERPT_CHARS = 80
_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\r": "\\r", "\n": "\\n"}


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Closed fenced blocks as (language tag, body), in order: one linear pass over lines.

    A fence opens at a line containing three backticks (the language tag follows them) and
    closes at the next line containing three backticks (text before them is code, so
    ``print(x)```" closes too); a one-line ```` ```x``` ```` is not a block.  Bodies are
    dedented (blocks indented inside markdown lists).
    """
    blocks: list[tuple[str, str]] = []
    lang: Optional[str] = None
    body: list[str] = []
    for line in text.split("\n"):
        k = line.find("```")
        if lang is None:
            if k < 0:
                continue
            rest = line[k + 3 :]
            if "```" in rest:
                continue
            words = rest.strip().split()
            lang, body = (words[0].lower() if words else ""), []
        elif k >= 0:
            if line[:k].strip():
                body.append(line[:k])
            blocks.append((lang, textwrap.dedent("\n".join(body) + "\n")))
            lang = None
        else:
            body.append(line)
    return blocks


def extract_code(completion: str) -> Optional[str]:
    """The completion's last ```` ```python ```` fenced block, else its last fenced block,
    else None."""
    if not isinstance(completion, str) or "```" not in completion:
        return None
    blocks = [(lang, body) for lang, body in _fenced_blocks(completion) if body.strip()]
    if not blocks:
        return None
    python = [body for lang, body in blocks if lang in _PYTHON_TAGS]
    return python[-1] if python else blocks[-1][1]


def _decoded(answer: Any) -> Any:
    """A gold ``answer`` as data: a JSON string or bytes decoded, anything else as given.
    Raises ``ValueError`` when the text is not valid JSON."""
    if not isinstance(answer, (str, bytes)):
        return answer
    try:
        return json.loads(answer)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"answer is not valid JSON ({type(exc).__name__})") from None


def parse_cases(answer: Any) -> list[tuple[str, str]]:
    """Test cases ``[(stdin, expected_stdout), ...]`` from the gold ``answer``.

    Raises ``ValueError`` with a short message when the answer is malformed.
    """
    data = _decoded(answer)
    if isinstance(data, dict) and "inputs" in data and "outputs" in data:
        ins, outs = data["inputs"], data["outputs"]
        if not isinstance(ins, list) or not isinstance(outs, list) or len(ins) != len(outs):
            raise ValueError("'inputs' and 'outputs' must be lists of the same length")
        data = [{"input": i, "output": o} for i, o in zip(ins, outs)]
    if not isinstance(data, list):
        raise ValueError(f"answer must be a list of test cases, not {type(data).__name__}")
    if not data:
        raise ValueError("answer has no test cases")
    if len(data) > MAX_CASES:
        raise ValueError(f"answer has {len(data)} test cases (at most {MAX_CASES})")
    cases = []
    for k, case in enumerate(data):
        if not isinstance(case, dict) or "input" not in case or "output" not in case:
            raise ValueError(f"test case {k} is not an object with 'input' and 'output'")
        stdin, expected = case["input"], case["output"]
        if not isinstance(stdin, str) or not isinstance(expected, str):
            raise ValueError(f"test case {k}: 'input' and 'output' must be strings")
        cases.append((stdin, expected))
    return cases


def _lines(text: str) -> list[str]:
    lines = [ln.rstrip() for ln in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def outputs_match(got: str, expected: str) -> bool:
    """Whether program output ``got`` equals ``expected`` up to trailing whitespace on each
    line and trailing blank lines."""
    return _lines(got) == _lines(expected)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _excerpt(text: str, limit: int = EXCERPT_CHARS) -> tuple[str, bool]:
    """``text`` as printable ASCII (other characters and the backslash escaped as in a Python
    literal), cut at ``limit`` characters of the escaped form; and whether it was cut."""
    out: list[str] = []
    used = 0
    for ch in text:
        o = ord(ch)
        if ch in _ESCAPES:
            piece = _ESCAPES[ch]
        elif 0x20 <= o < 0x7F:
            piece = ch
        elif o < 0x100:
            piece = f"\\x{o:02x}"
        elif o < 0x10000:
            piece = f"\\u{o:04x}"
        else:
            piece = f"\\U{o:08x}"
        if used + len(piece) > limit:
            return "".join(out), True
        out.append(piece)
        used += len(piece)
    return "".join(out), False


def _mismatch(got: str, expected: str) -> str:
    """Where ``got`` first differs from ``expected`` (line number, line counts and a short
    sanitised excerpt of the program's line), for the reason string."""
    g, e = _lines(got), _lines(expected)
    i = next((k for k, (a, b) in enumerate(zip(g, e)) if a != b), min(len(g), len(e)))
    if i >= len(g):
        return f"output ends after {len(g)} of {len(e)} lines"
    text, cut = _excerpt(g[i])
    notes = []
    if (len(g), len(e)) != (1, 1):
        notes.append(f"line {i + 1}; got {len(g)} lines, expected {len(e)}")
    if cut:
        notes.append(f"line is {len(g[i])} chars")
    return f"got '{text}'" + ("..." if cut else "") + (f" ({'; '.join(notes)})" if notes else "")


def _run_failure(res: Any, where: str, assertions: bool = False) -> Optional[str]:
    """The reason a sandboxed run failed (``where`` follows the verdict, e.g. `` on case 2/3``):
    a timeout, an output limit, or a non-zero exit with the last line of stderr escaped and cut;
    ``assertions``: an ``AssertionError`` is a failed test rather than a runtime error. None when
    the run exited 0."""
    if res.timed_out:
        return f"timeout{where}"
    if res.truncated:
        return f"output limit exceeded{where}"
    if res.returncode != 0:
        detail, cut = _excerpt(_last_line(res.stderr))
        kind = "test failed" if assertions and detail.startswith("AssertionError") else "runtime error"
        return f"{kind}{where} (exit status {res.returncode})" + (f": {detail}" + ("..." if cut else "")
                                                                   if detail else "")
    return None


def _never_raises(name: str):
    """A code verifier body made safe on model output: a completion that is not a
    string, a sandbox that cannot run, or any other error scores 0.0 with its reason; a limit
    the body does not take is the caller's error and raises TypeError, as a plain call would."""
    def wrap(body):
        signature = inspect.signature(body)

        @functools.wraps(body)
        def verifier(completion: Any, answer: Any, **limits: Any) -> tuple[float, str]:
            signature.bind(completion, answer, **limits)
            if not isinstance(completion, str):
                return 0.0, "completion is not a string"
            try:
                return body(completion, answer, **limits)
            except SandboxUnavailable as exc:
                return 0.0, f"sandbox error: {exc}"
            except Exception as exc:  # never let model output crash training
                logger.debug("%s verifier error", name, exc_info=True)
                return 0.0, f"verifier error: {type(exc).__name__}: {exc}"[:200]
        return verifier
    return wrap


@register("code")
@_never_raises("code")
def verify_code(
    completion: Any,
    answer: Any,
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    max_processes: int = 64,
    max_output_bytes: int = 65536,
) -> tuple[float, str]:
    """Score a code completion: 1.0 if its program passes every stdin/stdout test case of
    ``answer`` in the sandbox, else 0.0; with a reason.  Sandbox limits apply per
    case.  The reason holds the verdict and at most an ``EXCERPT_CHARS``-character escaped
    excerpt of the program's output (module docstring).  Never raises on malformed input."""
    try:
        cases = parse_cases(answer)
    except ValueError as exc:
        return 0.0, f"malformed test cases: {exc}"
    code = extract_code(completion)
    if code is None:
        return 0.0, "no code block found"
    for k, (stdin, expected) in enumerate(cases):
        res = run_sandboxed(
            code,
            stdin,
            timeout_s=timeout_s,
            memory_mb=memory_mb,
            max_processes=max_processes,
            max_output_bytes=max_output_bytes,
        )
        where = f"case {k + 1}/{len(cases)}"
        failure = _run_failure(res, f" on {where}")
        if failure:
            return 0.0, failure
        if not outputs_match(res.stdout, expected):
            return 0.0, f"wrong output on {where}: {_mismatch(res.stdout, expected)}"
    return 1.0, "correct"


# --------------------------------------------------------------------------------------------
# function-call tests (HumanEval's layout)

#: the keys of a ``python-tests`` answer
FUNCTION_KEYS = ("prompt", "test", "entry_point")


def parse_function_tests(answer: Any) -> dict:
    """The ``python-tests`` gold ``answer``: a JSON object (or the decoded dict) with
    ``prompt`` (the function's signature and docstring, after any imports and helpers it needs;
    may be empty), ``test`` (code defining ``check(candidate)``, or top-level asserts calling the
    function by name; not blank) and ``entry_point`` (the function's name), as HumanEval's records
    have them. Raises ``ValueError`` with a short message when malformed."""
    data = _decoded(answer)
    if not isinstance(data, dict):
        raise ValueError(f"answer must be an object with {', '.join(FUNCTION_KEYS)}, not {type(data).__name__}")
    for key in FUNCTION_KEYS:
        if not isinstance(data.get(key), str):
            raise ValueError(f"answer needs a string {key!r}")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", data["entry_point"]):
        raise ValueError(f"entry_point {data['entry_point'][:40]!r} is not a Python name")
    if not data["test"].strip():
        raise ValueError("answer has no test code")
    return {key: data[key] for key in FUNCTION_KEYS}


def _def_pattern(name: str, top_level: bool = False) -> re.Pattern:
    """A line that starts the definition of function ``name`` (indented too, unless
    ``top_level``). Matched line by line, anchored: a scan of a text is linear in its length."""
    return re.compile(("" if top_level else "[ \t]*") + rf"(?:async[ \t]+)?def[ \t]+{re.escape(name)}[ \t]*\(")


def _first_def(code: str, name: str, top_level: bool = False) -> Optional[int]:
    """The index of the first line of ``code`` that defines ``name``, else None."""
    pattern = _def_pattern(name, top_level)
    return next((k for k, line in enumerate(code.split("\n")) if "def" in line and pattern.match(line)), None)


def _indent(line: str) -> int:
    """The column of ``line``'s first character, a tab advancing to the next multiple of 8 as
    Python's tokenizer counts."""
    white = line[: len(line) - len(line.lstrip(" \t"))]
    return len(white.expandtabs(8))


def _function_body(lines: list[str]) -> list[str]:
    """``lines`` (a body in any consistent indentation, tabs expanded) re-indented by four
    spaces under a ``def`` line: dedented to their least indented code line first."""
    code = [ln for ln in lines if ln.strip()]
    margin = min((_indent(ln) for ln in code), default=0)
    out = []
    for line in lines:
        if not line.strip():
            out.append("")
            continue
        white = len(line) - len(line.lstrip(" \t"))
        out.append("    " + " " * (_indent(line) - margin) + line[white:])
    return out


def _body_lines(text: str, fenced: bool) -> list[str]:
    """The lines of the function's body in ``text``: a fenced block whole; an unfenced
    completion up to its first code line less indented than its first (prose after an indented
    body), or whole when its first code line is at column 0."""
    lines = text.split("\n")
    first = next((_indent(ln) for ln in lines if ln.strip()), 0)
    if fenced or first == 0:
        return lines
    for k, line in enumerate(lines):
        if line.strip() and _indent(line) < first:
            return lines[:k]
    return lines


def assemble_function(completion: str, prompt: str, entry_point: str) -> str:
    """The module that defines the completion's function, as models write it: a
    fenced block (else the whole completion) that defines ``entry_point`` replaces the prompt's
    function and keeps what comes before it (imports, helper functions); otherwise the block or
    completion is the function's body in any consistent indentation (spaces or tabs, at column 0
    or deeper), put under the prompt re-indented by four spaces; an unfenced body ends at its
    first line less indented than its first (the model's prose). Linear in the text's length."""
    block = extract_code(completion)
    text = block if block is not None else completion
    if _first_def(text, entry_point) is not None:
        start = _first_def(prompt, entry_point, top_level=True)
        return "\n".join(prompt.split("\n")[:start]) + "\n" + text
    return prompt.rstrip("\n") + "\n" + "\n".join(_function_body(_body_lines(text, block is not None))) + "\n"


@functools.lru_cache(maxsize=1)
def _boundary_source() -> str:
    """The source of :mod:`hista.rewards.boundary`, which both sides of the verifier run."""
    return Path(boundary.__file__).read_text(encoding="utf-8")


def _verdict(stdout: str) -> Optional[tuple[str, str]]:
    """The judge's verdict, ``("pass", calls)`` or ``("fail", reason)``: its last line of output,
    when that is a verdict."""
    line = _last_line(stdout)
    if not line.startswith(boundary.VERDICT + " "):
        return None
    kind, _, rest = line[len(boundary.VERDICT) + 1:].partition(" ")
    return (kind, rest) if kind in ("pass", "fail") else None


def _function_failure(judge: Any, subject: Any) -> Optional[str]:
    """Why the tests did not pass (None when they did): the judge's verdict, with the subject's
    exit status and last line of stderr when its process ended; else a timeout, an output limit,
    or the failed assertion or error of the tests (the code verifier's reasons, escaped)."""
    verdict = _verdict(judge.stdout)
    if verdict is not None and verdict[0] == "pass" and judge.returncode == 0:
        return None
    if verdict is not None and verdict[0] == "fail":
        reason, cut = _excerpt(verdict[1], 2 * EXCERPT_CHARS)
        reason += "..." if cut else ""
        if subject is not None and reason.endswith("process ended") and subject.returncode is not None:
            detail, cut = _excerpt(_last_line(subject.stderr))
            detail = f": {detail}" + ("..." if cut else "") if detail else ""
            reason += f" (exit status {subject.returncode}){detail}"
        return reason
    failure = _run_failure(judge, "", assertions=True)
    return failure or "verifier error: the tests gave no verdict"


@register("python-tests")
@_never_raises("python-tests")
def verify_python_tests(completion: Any, answer: Any, *, timeout_s: float = 10.0, memory_mb: int = 1024,
                        max_processes: int = 64, max_output_bytes: int = 65536) -> tuple[float, str]:
    """Score a completion against function-call tests across a trust boundary: the
    problem's ``prompt`` and ``test`` code (and ``check(entry_point)`` when the test defines
    ``check``: HumanEval; MBPP+'s tests are top-level asserts) run in one sandbox, the judge of
    :mod:`hista.rewards.boundary`; the completion's function (:func:`assemble_function`) runs in
    another, which only ever receives the arguments of a call and returns plain data or an
    exception (never in this process). 1.0 only if the tests end without an error having called
    the function; else 0.0 with a reason: the failed assertion or error (the last line of the
    tests' stderr, escaped and cut as the ``code`` verifier's), a reply that is not plain data,
    the function's process ending (with its exit status and last line of stderr), a timeout, an
    output limit. A row without test code scores 0. Never raises on malformed input."""
    try:
        spec = parse_function_tests(answer)
    except ValueError as exc:
        return 0.0, f"malformed function tests: {exc}"
    problem = {**spec, "check": _first_def(spec["test"], "check", top_level=True) is not None}
    module = assemble_function(completion, spec["prompt"], spec["entry_point"])
    source = _boundary_source()
    judge, subject = run_judged(source + "\njudge()\n", boundary.encode(problem),
                                source + f"\nserve({spec['entry_point']!r})\n", module,
                                timeout_s=timeout_s, memory_mb=memory_mb, max_processes=max_processes,
                                max_output_bytes=max_output_bytes)
    failure = _function_failure(judge, subject)
    return (0.0, failure) if failure else (1.0, "correct")
