"""The value model of the PPO critic (SPEC §4.5): a causal-LM backbone (a copy of the policy's
transformer, without its vocabulary head) plus a linear head H → 1 applied at every position.

V_t, the value of the state "prompt + first t completion tokens", is the head's output at the
position of that state's last token. Training may be limited to the last k decoder layers (and
what follows them, the final norm) plus the head; the rest of the backbone is frozen.

A critic folder (:meth:`ValueModel.save_pretrained`):

- ``critic.json``: what the critic is (format, hista version, backbone model and revision,
  hidden size, layers, layers trained) plus whatever its trainer records (policy, λ, γ, mode,
  fold, training data);
- ``value_head.safetensors``: the head's ``weight`` [1, H] and ``bias`` [1];
- ``backbone/``: the whole backbone as transformers' ``save_pretrained`` writes it, when every
  layer was trained; otherwise ``trained_layers.safetensors`` holds only the trained backbone
  tensors and the frozen rest is the backbone model itself, reloaded by name (its revision is
  checked), which keeps a CPU critic a few MB instead of a copy of the policy.
"""

from __future__ import annotations

import contextlib
import copy
import os
from pathlib import Path
from typing import Any, Optional, Sequence

import torch

from .. import __version__, provenance
from ..errors import InputError
from ..jsonio import loads, write_json_atomic
from ..models.capture import decoder_stack

FORMAT = "hista-critic/1"
CONFIG, HEAD, TRAINED, BACKBONE = "critic.json", "value_head.safetensors", "trained_layers.safetensors", "backbone"
#: how to repair a damaged critic folder (the end of :func:`check_folder`'s messages)
REWRITE = "remove this critic folder and write it again (rerun hista critic train: it trains only missing critics)"


def _text_config(config: Any) -> Any:
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def check_layers(layers: Optional[int], count: int, *, field: str) -> int:
    """The number of decoder layers a critic trains (SPEC §4.5): ``layers``, or ``count`` (all)
    for None; an InputError naming ``field`` when it is not 0 to ``count``."""
    k = count if layers is None else int(layers)
    if not 0 <= k <= count:
        raise InputError(f"cannot train the last {k} layers: the backbone has {count} (use 0 to {count})",
                         field=field)
    return k


class ValueModel(torch.nn.Module):
    """A critic (SPEC §4.5): ``backbone`` (a transformers base model such as LlamaModel) and a
    linear ``head`` H → 1 on its last hidden states. ``info`` is the record written to
    ``critic.json``. Build one from a policy with :meth:`from_policy`, load a saved one with
    :meth:`from_pretrained`."""

    def __init__(self, backbone: torch.nn.Module, head: Optional[torch.nn.Linear] = None, *,
                 info: Optional[dict] = None, layers: Optional[int] = None):
        super().__init__()
        self.backbone = backbone
        hidden = int(_text_config(backbone.config).hidden_size)
        self.head = head if head is not None else torch.nn.Linear(hidden, 1)
        self.info = dict(info or {})
        self.vocab_size = int(backbone.get_input_embeddings().num_embeddings)
        self._blocks_name, self._blocks = decoder_stack(backbone)
        self._tail_exact: Optional[bool] = None
        #: a :class:`hista.critic.fit.FrozenFeatures` that :meth:`values` reads and fills
        #: (critics with the same frozen layers share their work; None: computed per call)
        self.shared_features: Any = None
        self.layers_trained = self.set_trainable(layers)

    @classmethod
    def from_policy(cls, lm: Any, *, layers: Optional[int] = None, init_value: float = 0.0) -> "ValueModel":
        """A fresh critic whose backbone is a float32 copy of the policy's (``lm``, a
        :class:`hista.models.LoadedModel`; the policy is left untouched) and whose head gives
        ``init_value`` everywhere (weight 0, bias ``init_value``); the last ``layers`` decoder
        layers are trainable (None: all). SPEC §4.5."""
        backbone = copy.deepcopy(lm.model.base_model).float()
        model = cls(backbone, info={"backbone": {"model": lm.name, "revision": lm.revision}}, layers=layers)
        with torch.no_grad():
            model.head.weight.zero_()
            model.head.bias.fill_(float(init_value))
        return model.to(lm.device)

    @property
    def device(self) -> torch.device:
        return self.head.weight.device

    @property
    def num_layers(self) -> int:
        return len(self._blocks)

    def set_trainable(self, layers: Optional[int]) -> int:
        """Freeze the backbone but for its last ``layers`` decoder layers and what follows them
        (the final norm); the head always trains (SPEC §4.5). None or the layer count: the whole
        backbone trains; 0: the head only. Returns the number of layers trained."""
        prefix, blocks = self._blocks_name, self._blocks
        count = len(blocks)
        k = check_layers(layers, count, field="layers")
        first = count - k  # the first trained block
        before = True  # parameters registered before the blocks (the embeddings) freeze with the first one
        for name, param in self.backbone.named_parameters():
            index = _block_index(name, prefix)
            if index is not None:
                before = False
                param.requires_grad_(index >= first)
            else:
                param.requires_grad_(k == count or (not before and k > 0))
        self.head.requires_grad_(True)
        self.layers_trained = k
        return k

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The head's output at every position, [B, L] (SPEC §4.5)."""
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        return self.head(out.last_hidden_state.float()).squeeze(-1)

    # ---- frozen layers computed once ----------------------------------------------------------
    @contextlib.contextmanager
    def _only_blocks(self, blocks: Sequence[torch.nn.Module]):
        """Within the block, the backbone's decoder stack is ``blocks`` only."""
        parent_name, _, attr = self._blocks_name.rpartition(".")
        parent = self.backbone.get_submodule(parent_name) if parent_name else self.backbone
        setattr(parent, attr, torch.nn.ModuleList(blocks))
        try:
            yield
        finally:
            setattr(parent, attr, self._blocks)

    @property
    def first_trained(self) -> int:
        """Index of the first trained decoder layer (the layer count when only the head trains)."""
        return self.num_layers - self.layers_trained

    def can_skip_frozen(self) -> bool:
        """Whether training may run the trained layers alone on :meth:`features` computed once
        (SPEC §4.5): the backbone is partly frozen and, checked once on a padded probe batch,
        feeding its input embeddings past the frozen layers reproduces the full pass's last
        hidden states within 1e-4 of their largest magnitude (float rounding; true for Llama /
        Qwen / Mistral; a model that transforms its input embeddings, such as GPT-2 or Gemma,
        falls back to full passes)."""
        if not 0 < self.first_trained < self.num_layers:
            return False
        if self._tail_exact is None:
            probe_p, probe_c = [[1, 2, 3], [4]], [[5, 6, 7, 8], [9, 10]]
            was_training = self.training
            self.eval()
            try:
                with torch.no_grad():
                    full = self.sequence_values(probe_p, probe_c, hidden=True)
                    fast = self.sequence_values(probe_p, probe_c, hidden=True,
                                                features=self.features(probe_p, probe_c))
                self._tail_exact = all(float((a - b).abs().max()) <= 1e-4 * (1.0 + float(a.abs().max()))
                                       for a, b in zip(full, fast))
            except (TypeError, ValueError, RuntimeError):
                self._tail_exact = False
            finally:
                self.train(was_training)
        return self._tail_exact

    @torch.no_grad()
    def features(self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], *,
                 batch_size: int = 16) -> list[torch.Tensor]:
        """The input of the first trained decoder layer for each prompt + completion row (SPEC
        §4.5): what the frozen layers compute, which no training step changes, so a critic's
        training computes it once (:meth:`can_skip_frozen`). One float32 [L_i, H] per row on the
        CPU. Only the frozen layers and the first trained one run, and a prompt shared by
        several rows is encoded once (:func:`hista.models.forward.shared_prefix_hidden`)."""
        from ..models.forward import shared_prefix_hidden

        first = self.first_trained
        if not 0 < first < self.num_layers:
            raise ValueError("features need a frozen layer and a trained one: this critic trains "
                             + ("every layer" if first == 0 else "its head only"))
        self._check_rows(prompt_ids, completion_ids)
        with self._only_blocks(self._blocks[: first + 1]):  # the last hidden state is normed; the one before is not
            return shared_prefix_hidden(self.backbone, prompt_ids, completion_ids, [first], batch_size)[first]

    def _check_rows(self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]]
                    ) -> list[list[int]]:
        """The prompt + completion rows, after a ValueError for a prompt without tokens or a
        token id outside the vocabulary."""
        if len(prompt_ids) != len(completion_ids):
            raise ValueError(f"{len(prompt_ids)} prompts but {len(completion_ids)} completions")
        rows = [list(p) + list(c) for p, c in zip(prompt_ids, completion_ids)]
        for p, row in zip(prompt_ids, rows):
            if not p:
                raise ValueError("a prompt must hold at least one token: V_0 is read at its last token")
            bad = [t for t in row if not 0 <= int(t) < self.vocab_size]
            if bad:
                raise ValueError(f"token id {bad[0]} is outside the critic's vocabulary (0 to {self.vocab_size - 1})")
        return rows

    def _pad(self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]]
             ) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-padded input ids and attention mask [B, L] of prompt + completion rows, on the
        model's device, after checking the rows (a prompt token, ids inside the vocabulary)."""
        rows = self._check_rows(prompt_ids, completion_ids)
        width = max(len(r) for r in rows)
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for k, row in enumerate(rows):
            ids[k, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[k, : len(row)] = 1
        return ids.to(self.device), mask.to(self.device)

    def _from_features(self, features: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Hidden states [B, L, H] after the trained layers and the final norm, from each row's
        :meth:`features` (right-padded), with the mask [B, L]."""
        width = max(len(f) for f in features)
        embeds = torch.zeros((len(features), width, features[0].size(-1)), device=self.device)
        mask = torch.zeros((len(features), width), dtype=torch.long, device=embeds.device)
        for k, f in enumerate(features):
            embeds[k, : len(f)] = f
            mask[k, : len(f)] = 1
        with self._only_blocks(self._blocks[self.first_trained:]):
            out = self.backbone(inputs_embeds=embeds, attention_mask=mask, use_cache=False)
        return out.last_hidden_state, mask

    def sequence_values(self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], *,
                        terminal: bool = False, features: Optional[Sequence[torch.Tensor]] = None,
                        hidden: bool = False) -> list[torch.Tensor]:
        """V_0 .. V_{T−1} of each prompt + completion row, from one right-padded forward pass
        with gradients (SPEC §4.5): V_t is the head's output at the last token of the prompt
        plus the first t completion tokens. With ``terminal`` V_T (after the whole completion)
        is appended. One tensor [T_i] (or [T_i + 1]) per row, on the model's device. With
        ``features`` (the rows' :meth:`features`) only the trained layers run; with ``hidden``
        the rows' last hidden states [L_i, H] are returned instead of values."""
        if not prompt_ids:
            return []
        if features is None:
            ids, mask = self._pad(prompt_ids, completion_ids)
            states = self.backbone(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
        else:
            states, mask = self._from_features(features)
        if hidden:
            return [states[k, : int(n)] for k, n in enumerate(mask.sum(dim=1))]
        out = self.head(states.float()).squeeze(-1)
        extra = 1 if terminal else 0
        return [out[k, len(p) - 1 : len(p) - 1 + len(c) + extra] for k, (p, c) in enumerate(zip(prompt_ids,
                                                                                                completion_ids))]

    @torch.no_grad()
    def values(self, prompt_ids: Sequence[int], completion_ids: Sequence[Sequence[int]], *, terminal: bool = False,
               batch_size: int = 8) -> list[torch.Tensor]:
        """Per-state values of completions of one prompt (SPEC §4.5): for each completion of T
        tokens, float32 [T] on the CPU holding V_0 .. V_{T−1} (``terminal``: also V_T), in
        micro-batches of ``batch_size``, without gradients and in eval mode; a partly frozen
        critic encodes the prompt once through its frozen layers (:meth:`features`, or the
        :attr:`shared_features` critics with the same frozen layers share). A token id
        outside the vocabulary raises ValueError."""
        was_training = self.training
        self.eval()
        try:
            out: list[torch.Tensor] = []
            completions = [list(c) for c in completion_ids]
            prompts = [list(prompt_ids)] * len(completions)
            feats = None
            if completions and self.shared_features is not None:
                feats = self.shared_features.get(self, [(p, c, 0.0) for p, c in zip(prompts, completions)],
                                                 batch_size=batch_size, progress=False)
            elif completions and self.can_skip_frozen():
                feats = self.features(prompts, completions, batch_size=batch_size)
            for start in range(0, len(completions), batch_size):
                part = slice(start, start + batch_size)
                values = self.sequence_values(prompts[part], completions[part], terminal=terminal,
                                              features=feats[part] if feats is not None else None)
                out.extend(v.float().cpu() for v in values)
            return out
        finally:
            self.train(was_training)

    def trained_state(self) -> dict[str, torch.Tensor]:
        """The backbone tensors that train (SPEC §4.5): what a critic folder stores when only
        the last layers were trained."""
        return {n: p.detach().cpu().contiguous() for n, p in self.backbone.named_parameters() if p.requires_grad}

    def save_pretrained(self, folder: str | os.PathLike) -> Path:
        """Write the critic into ``folder`` (SPEC §4.5: ``save_pretrained`` conventions; see the
        module docstring for the layout) and return it."""
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        full = self.layers_trained == self.num_layers
        if full:
            self.backbone.save_pretrained(folder / BACKBONE)
        else:
            save_file(self.trained_state(), str(folder / TRAINED))
        save_file({"weight": self.head.weight.detach().cpu().contiguous(),
                   "bias": self.head.bias.detach().cpu().contiguous()}, str(folder / HEAD))
        record = {**self.info, "format": FORMAT, "hista_version": __version__, "code": provenance.code(),
                  "hidden_size": self.head.in_features, "num_layers": self.num_layers,
                  "layers_trained": self.layers_trained, "weights": BACKBONE if full else TRAINED}
        write_json_atomic(folder / CONFIG, record)
        self.info = record
        return folder

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike, *, device: Optional[str] = None,
                        fix: str = REWRITE) -> "ValueModel":
        """Load a critic written by :meth:`save_pretrained` (SPEC §4.5), in eval mode on
        ``device`` (default: cuda when available), after :func:`check_folder` (whose messages
        end with ``fix``). An InputError names the folder or file and what is missing or does
        not match (a file, the backbone's revision, the tensors)."""
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        folder = Path(folder)
        info = check_folder(folder, fix=fix)
        try:
            if info["weights"] == BACKBONE:
                from transformers import AutoModel

                backbone = AutoModel.from_pretrained(folder / BACKBONE, dtype=torch.float32)
                trained = None
            else:
                backbone = _reload_backbone(folder, info)
                trained = load_file(str(folder / TRAINED))
            head = load_file(str(folder / HEAD))
        except (OSError, SafetensorError, ValueError) as exc:
            if isinstance(exc, InputError):
                raise
            raise InputError(f"cannot load the critic's weights ({type(exc).__name__}: {exc})", path=str(folder)) \
                from None
        model = cls(backbone, info=info, layers=info["layers_trained"])
        if trained is not None:
            expected = set(model.trained_state())
            if set(trained) != expected:
                raise InputError(f"{TRAINED} holds other tensors than the last {info['layers_trained']} layers of "
                                 f"{info['backbone']['model']}", path=str(folder))
            model.backbone.load_state_dict(trained, strict=False)
        if set(head) != {"weight", "bias"} or tuple(head["weight"].shape) != (1, model.head.in_features):
            raise InputError(f"{HEAD} is not a head of hidden size {model.head.in_features}", path=str(folder))
        model.head.load_state_dict(head)
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        return model.to(device).eval()


def _block_index(name: str, prefix: str) -> Optional[int]:
    """The decoder-layer index of parameter ``name`` (``layers.3.mlp.up_proj.weight`` -> 3)."""
    head = f"{prefix}." if prefix else ""
    if not name.startswith(head):
        return None
    first = name[len(head):].split(".", 1)[0]
    return int(first) if first.isdigit() else None


def read_info(folder: str | os.PathLike) -> dict:
    """The ``critic.json`` record of a critic folder (SPEC §4.5); an InputError naming the file
    when it is missing, not JSON, or lacks a field the loader needs."""
    path = Path(folder) / CONFIG
    if (path.exists() or path.is_symlink()) and not path.is_file():
        raise InputError("is not a regular file", path=str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"is not a critic folder (no {CONFIG}; write one with hista critic train)",
                         path=str(folder)) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"is not UTF-8 JSON ({exc.reason} at byte {exc.start})", path=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read it ({exc.strerror or exc})", path=str(path)) from None
    info = loads(text, path=str(path))
    if not isinstance(info, dict) or info.get("format") != FORMAT:
        raise InputError(f"is not a critic record (format {FORMAT!r} expected)", path=str(path))
    backbone = info.get("backbone")
    if not (isinstance(backbone, dict) and isinstance(backbone.get("model"), str)
            and isinstance(backbone.get("revision"), str)):
        raise InputError("expected {'model': ..., 'revision': ...}", path=str(path), field="backbone")
    if info.get("weights") not in (BACKBONE, TRAINED):
        raise InputError(f"expected {BACKBONE!r} or {TRAINED!r}", path=str(path), field="weights")
    layers = info.get("layers_trained")
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 0:
        raise InputError("expected a number of layers", path=str(path), field="layers_trained")
    return info


def _positive_int(info: dict, key: str, path: str) -> int:
    value = info.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"expected a positive integer, got {value!r}", path=path, field=key)
    return value


def _check_tensors(file: Path, shapes: Optional[dict[str, list[int]]], fix: str) -> None:
    """An InputError naming ``file`` unless it is a regular safetensors file whose header is
    sound and matches its size (:func:`hista.models.loading.safetensors_problem`) and, with
    ``shapes``, holds exactly those tensor names and shapes (read from the header only)."""
    from ..models.loading import safetensors_problem

    if not file.is_file():
        what = "is not a regular file" if file.exists() or file.is_symlink() else "is missing"
        raise InputError(f"{what}; {fix}", path=str(file))
    problem = safetensors_problem(file)
    if problem is not None:
        raise InputError(f"{problem}; {fix}", path=str(file))
    if shapes is None:
        return
    from safetensors import safe_open

    try:
        with safe_open(str(file), framework="pt") as fh:
            found = {name: list(fh.get_slice(name).get_shape()) for name in fh.keys()}
    except Exception as exc:  # noqa: BLE001 - SafetensorError and the like: the header is damaged
        raise InputError(f"is damaged ({type(exc).__name__}: {exc}); {fix}", path=str(file)) from None
    if found != shapes:
        raise InputError(f"holds the tensors {found}, not those of a value head of hidden size "
                         f"{shapes['weight'][1]} ({shapes}); {fix}", path=str(file))


def check_folder(folder: str | os.PathLike, *, fix: str = REWRITE) -> dict:
    """The ``critic.json`` record of a critic folder (SPEC §4.5), after checking every file the
    loader needs without loading a tensor: :func:`read_info`, the sizes it records
    (``hidden_size``, ``num_layers``, ``layers_trained`` at most ``num_layers``, ``weights``
    ``backbone`` exactly when every layer trained), ``value_head.safetensors`` (a sound header,
    as long as it says, holding ``weight`` [1, H] and ``bias`` [1]), and
    ``trained_layers.safetensors`` or ``backbone/`` (its ``config.json`` and sound
    ``*.safetensors``). An InputError names the first damaged file and field, followed by
    ``fix`` (how to repair it)."""
    from ..models.loading import check_weights

    folder = Path(folder)
    info = read_info(folder)
    path = str(folder / CONFIG)
    hidden, count = _positive_int(info, "hidden_size", path), _positive_int(info, "num_layers", path)
    trained = info["layers_trained"]
    if trained > count:
        raise InputError(f"{trained} layers trained, but the critic has {count}", path=path, field="layers_trained")
    weights = BACKBONE if trained == count else TRAINED
    if info["weights"] != weights:
        raise InputError(f"expected {weights!r}: the critic trained {trained} of its {count} layers", path=path,
                         field="weights")
    _check_tensors(folder / HEAD, {"bias": [1], "weight": [1, hidden]}, fix)
    if weights == TRAINED:
        _check_tensors(folder / TRAINED, None, fix)
        return info
    config = folder / BACKBONE / "config.json"
    if not config.is_file():
        raise InputError(f"is missing; {fix}", path=str(config))
    try:
        record = loads(config.read_text(encoding="utf-8"), path=str(config))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read it ({exc}); {fix}", path=str(config)) from None
    if not isinstance(record, dict):
        raise InputError(f"is not a model configuration (a JSON object); {fix}", path=str(config))
    if not any((folder / BACKBONE).glob("*.safetensors")):
        raise InputError(f"holds no *.safetensors weights; {fix}", path=str(folder / BACKBONE))
    check_weights(folder / BACKBONE, fix)
    return info


def _reload_backbone(folder: Path, info: dict) -> torch.nn.Module:
    """The frozen backbone of a critic saved with its trained layers only: its model, loaded
    by name on the CPU, at the revision the critic recorded."""
    from ..models import load

    name, revision = info["backbone"]["model"], info["backbone"]["revision"]
    lm = load(name, device="cpu", dtype=torch.float32)
    if lm.revision != revision:
        raise InputError(f"the critic's frozen layers come from {name} revision '{revision}', but that model is now "
                         f"revision '{lm.revision}'", path=str(folder / CONFIG), field="backbone")
    return lm.model.base_model
