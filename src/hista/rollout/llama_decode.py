"""Decode steps of Llama-family decoders on CPU without transformers' module stack (SPEC §7, §12).

On two cores, a batch-16 decode step of the embedded model spends about a third of its time
outside its linear layers, and much of that is Python: some 400 module calls, the cache object,
the attention interface and the slicing of packed products, each a few microseconds. For the
decoders whose layer is Llama's (pre-norm residual blocks, rotary attention with grouped KV
heads, a gated MLP, full attention: Llama, Qwen2, Mistral without a sliding window), a
:class:`Decoder` runs the same float32 operations in the same order straight on the packed
weights of :mod:`hista.models.packed`, with the shared-prefix attention of
:mod:`hista.rollout.prefix_attention` and each row's generated keys and values in buffers
reserved for the whole completion. Norms, activations, embeddings and rotary tables stay the
model's own modules. Its logits equal those of the module stack up to float rounding
(tests/test_rollout.py); other models decode through the module stack.
"""

from __future__ import annotations

import torch

from ..models import packed
from . import prefix_attention

#: model types whose decoder layer is Llama's
FAMILY = ("llama", "qwen2", "mistral")


def _layers(model: torch.nn.Module) -> list:
    return list(getattr(getattr(model, "model", None), "layers", None) or [])


def supported(model: torch.nn.Module) -> bool:
    """Whether :class:`Decoder` can run ``model``'s decode steps (SPEC §7): a float32 CPU model of
    :data:`FAMILY` with full attention everywhere (:func:`prefix_attention.supported`), whose
    layers have Llama's modules, and oneDNN's packed linears available."""
    layers = _layers(model)
    parts = ("input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
             "self_attn.v_proj", "self_attn.o_proj", "self_attn.scaling", "mlp.gate_proj", "mlp.up_proj",
             "mlp.down_proj", "mlp.act_fn")

    def has(owner, name: str) -> bool:
        for part in name.split("."):
            owner = getattr(owner, part, None)
        return owner is not None

    return (getattr(model.config, "model_type", None) in FAMILY and bool(layers)
            and all(has(model, name) for name in ("lm_head", "model.embed_tokens", "model.rotary_emb", "model.norm"))
            and all(has(layer, name) for layer in layers for name in parts)
            and not any(hasattr(layer.self_attn, "q_norm") for layer in layers)
            and all(p.dtype == torch.float32 for p in model.parameters())
            and packed.available(model) and prefix_attention.supported(model))


class Decoder:
    """Decode steps of ``model`` (see :func:`supported`) for ``rows`` rows of at most
    ``capacity`` generated tokens each, attending to a :class:`prefix_attention.SharedPrefix`.
    Its products use the packed weights that :func:`hista.models.packed.packed_linears` uses
    (packed once per version of the weights)."""

    def __init__(self, model: torch.nn.Module, rows: int, capacity: int):
        self.inner = inner = model.model
        first = inner.layers[0].self_attn
        self.heads, self.kv_heads, self.dim = (model.config.num_attention_heads, model.config.num_key_value_heads,
                                               first.head_dim)
        self.layers = []
        for layer in inner.layers:
            attn, mlp = layer.self_attn, layer.mlp
            self.layers.append((layer.input_layernorm, packed.product([attn.q_proj, attn.k_proj, attn.v_proj]),
                                packed.product([attn.o_proj]), attn.scaling, layer.post_attention_layernorm,
                                packed.product([mlp.gate_proj, mlp.up_proj]), mlp.gate_proj.out_features,
                                mlp.act_fn, packed.product([mlp.down_proj])))
        self.head = packed.product([model.lm_head])
        weight = first.q_proj.weight
        shape = (rows, self.kv_heads, capacity, self.dim)
        self.keys = [weight.new_empty(shape) for _ in self.layers]
        self.values = [weight.new_empty(shape) for _ in self.layers]
        self.length = 0

    def batch_select_indices(self, index: torch.Tensor) -> None:
        """Keep the rows ``index`` (in order) of the generated keys and values, as a transformers
        cache does when the generation loop drops finished rows."""
        self.keys = [k[index] for k in self.keys]
        self.values = [v[index] for v in self.values]

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor, position: torch.Tensor, prefix: prefix_attention.SharedPrefix) -> torch.Tensor:
        """The float32 next-token logits [B, V] after feeding ``tokens`` [B, 1] at ``position``
        [B, 1], each row attending to its prefix in ``prefix`` and to the tokens it fed before
        (SPEC §7)."""
        rows, heads, kv_heads, dim = tokens.shape[0], self.heads, self.kv_heads, self.dim
        x = self.inner.embed_tokens(tokens[:, 0])
        cos, sin = self.inner.rotary_emb(x, position)  # [B, 1, D]: one table for every head
        t, half = self.length, dim // 2
        for i, (norm, qkv_proj, o_proj, scale, mlp_norm, gate_up, width, act, down) in enumerate(self.layers):
            qkv = qkv_proj(norm(x))
            qk = qkv[:, : (heads + kv_heads) * dim].view(rows, heads + kv_heads, dim)
            qk = qk * cos + torch.cat((-qk[..., half:], qk[..., :half]), dim=-1) * sin  # rotary, as transformers'
            self.keys[i][:, :, t] = qk[:, heads:]
            self.values[i][:, :, t] = qkv[:, (heads + kv_heads) * dim :].view(rows, kv_heads, dim)
            query = qk[:, :heads].view(rows, kv_heads, heads // kv_heads, dim)
            out = prefix_attention.attend(query, self.keys[i][:, :, : t + 1], self.values[i][:, :, : t + 1], prefix,
                                          i, scale)
            x = x + o_proj(out.reshape(rows, heads * dim))
            hidden = gate_up(mlp_norm(x))
            x = x + down(act(hidden[:, :width]) * hidden[:, width:])
        self.length += 1
        return self.head(self.inner.norm(x)).float()
