"""Model arithmetic: parameter counts and FLOPs of a (dense or mixture-of-experts) decoder-only transformer.

Conventions, chosen to match the published runs we check against:
- A non-gated MLP model is GPT-style (Megatron GPT): biases, LayerNorm, learned position embeddings, dropout.
  A gated-MLP model is Llama-style: no biases, RMSNorm, rotary positions, no dropout.
- FLOPs count a multiply-add as 2 and the attention score/value products over the full s x s square,
  as Megatron's Eq. 3 (Narayanan et al. 2021) and PaLM's MFU do, so "model FLOPs" are comparable with published
  TFLOP/s figures. The compute-time model separately knows that causal flash attention does half of that work.

Two independent parameter counts are kept on purpose (nanoGPT habit): `param_count` is closed form, and
`param_tensors` walks the tensors of one layer of each kind; tests check they agree.
"""
from __future__ import annotations

from dataclasses import dataclass

from .spec import ModelSpec


def is_gpt_style(m: ModelSpec) -> bool:
    """GPT-style (biases, LayerNorm, learned positions, dropout) vs Llama-style; see module docstring."""
    return not m.gated_mlp


def kv_dim(m: ModelSpec) -> int:
    """Width of the K (or V) projection: kv_heads x head_dim (= hidden without grouped-query attention)."""
    return m.kv_heads * m.head_dim


def mlp_matrices(m: ModelSpec) -> int:
    """Weight matrices in one MLP: 3 for a gated (SwiGLU) MLP, 2 otherwise (Shazeer 2020)."""
    return 3 if m.gated_mlp else 2


def mlp_width_per_token(m: ModelSpec) -> float:
    """MLP width one token passes through, averaged over layers: ffn_hidden in dense layers, the top-k routed
    plus shared experts' widths in MoE layers. Sizes the per-token activation and element-wise traffic."""
    return _per_token(m, m.ffn_hidden, m.expert_ffn_hidden)


def mlp_inputs_per_token(m: ModelSpec) -> float:
    """Elements of MLP input one token feeds its MLP's first GEMM, averaged over layers: h in dense layers, one
    h-wide copy per routed and shared expert it reaches in MoE layers (each expert's GEMM reads its own copy of
    the dispatched token)."""
    return _per_token(m, m.hidden, m.hidden)


def _per_token(m: ModelSpec, dense: int, per_expert: int) -> float:
    """`dense` in a dense layer, `per_expert` times the routed and shared experts a token reaches in an MoE layer,
    averaged over the layers."""
    if not m.is_moe:
        return float(dense)
    moe = (m.top_k + m.shared_experts) * per_expert
    return ((m.layers - m.moe_layers) * dense + m.moe_layers * moe) / m.layers


@dataclass(frozen=True)
class ParamCount:
    """Parameters by where they live; `active` counts what one token touches (top-k experts only)."""

    attention_per_layer: int
    dense_mlp_per_layer: int
    expert_per_layer: int        # one routed expert
    shared_per_layer: int        # all shared experts of one MoE layer
    router_per_layer: int
    norms_per_layer: int
    embedding: int               # input embedding (+ learned positions)
    output: int                  # output projection (0 when tied) + final norm
    total: int
    active: int

    @property
    def per_dense_layer(self) -> int:
        return self.attention_per_layer + self.dense_mlp_per_layer + self.norms_per_layer

    @property
    def per_moe_layer(self) -> int:
        return self.attention_per_layer + self.norms_per_layer + self.router_per_layer + self.shared_per_layer

    def routed_experts_per_layer(self, experts: int) -> int:
        return self.expert_per_layer * experts


def param_count(m: ModelSpec) -> ParamCount:
    """Closed-form parameter count.

    Attention: Q and O are h x h, K and V are h x kv_dim (Ainslie et al. 2023, GQA). MLP: 2 or 3 matrices of
    h x ffn (Vaswani et al. 2017; Shazeer 2020 for gated). GPT-style adds biases and 2 LayerNorm vectors per norm;
    with h = ffn/4 and MHA this is Megatron's Eq. 2: P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)).
    """
    h, f, fe = m.hidden, m.ffn_hidden, m.expert_ffn_hidden
    gpt = is_gpt_style(m)
    kvd = kv_dim(m)
    attention = 2 * h * h + 2 * h * kvd + ((h + 2 * kvd) + h if gpt else 0)         # weights (+ QKV, O biases)
    dense_mlp = mlp_matrices(m) * h * f + ((f + h) if gpt else 0)                     # weights (+ biases)
    expert = mlp_matrices(m) * h * fe + ((fe + h) if gpt else 0)
    norms = 2 * (2 * h if gpt else h)                                                 # LayerNorm: scale + bias
    router = h * m.experts if m.is_moe else 0
    embedding = m.vocab * h + (m.seq_len * h if gpt else 0)                           # + learned positions
    output = (0 if m.tied_embeddings else m.vocab * h) + (2 * h if gpt else h)        # + final norm
    dense_layers = m.layers - m.moe_layers
    moe_common = attention + norms + router + m.shared_experts * expert
    total = (dense_layers * (attention + dense_mlp + norms) + m.moe_layers * (moe_common + m.experts * expert)
             + embedding + output)
    active = (dense_layers * (attention + dense_mlp + norms) + m.moe_layers * (moe_common + m.top_k * expert)
              + embedding + output)
    return ParamCount(attention, dense_mlp, expert, m.shared_experts * expert, router, norms, embedding, output,
                      total, active)


def param_tensors(m: ModelSpec) -> list[tuple[str, tuple[int, ...]]]:
    """Every parameter tensor of the model by name and shape: the layer-by-layer cross-check of param_count."""
    h, gpt = m.hidden, is_gpt_style(m)
    kvd = kv_dim(m)
    tensors: list[tuple[str, tuple[int, ...]]] = [("embed.tokens", (m.vocab, h))]
    if gpt:
        tensors.append(("embed.positions", (m.seq_len, h)))

    def norm(prefix: str) -> None:
        tensors.append((f"{prefix}.weight", (h,)))
        if gpt:
            tensors.append((f"{prefix}.bias", (h,)))

    def linear(name: str, fan_in: int, fan_out: int) -> None:
        tensors.append((f"{name}.weight", (fan_out, fan_in)))
        if gpt:
            tensors.append((f"{name}.bias", (fan_out,)))

    def mlp(prefix: str, width: int) -> None:
        if m.gated_mlp:
            linear(f"{prefix}.gate", h, width)
        linear(f"{prefix}.up", h, width)
        linear(f"{prefix}.down", width, h)

    for i in range(m.layers):
        p = f"layers.{i}"
        norm(f"{p}.norm1")
        linear(f"{p}.attn.q", h, h)
        linear(f"{p}.attn.k", h, kvd)
        linear(f"{p}.attn.v", h, kvd)
        linear(f"{p}.attn.o", h, h)
        norm(f"{p}.norm2")
        if m.is_moe and i >= m.dense_layers:
            tensors.append((f"{p}.router.weight", (m.experts, h)))
            for e in range(m.experts):
                mlp(f"{p}.experts.{e}", m.expert_ffn_hidden)
            for e in range(m.shared_experts):
                mlp(f"{p}.shared.{e}", m.expert_ffn_hidden)
        else:
            mlp(f"{p}.mlp", m.ffn_hidden)
    norm("final_norm")
    if not m.tied_embeddings:
        tensors.append(("output.weight", (m.vocab, h)))
    return tensors


@dataclass(frozen=True)
class FlopsPerToken:
    """Forward FLOPs per token (2 per multiply-add), split by kind of work."""

    gemm_per_layer: float          # dense or MoE layer average: projections + MLP (+ active experts, router)
    attention_per_layer: float     # QK^T and AV over the full s x s square (4 s h)
    logits: float                  # output projection, once per token

    def forward(self, layers: int) -> float:
        return layers * (self.gemm_per_layer + self.attention_per_layer) + self.logits


def flops_per_token(m: ModelSpec) -> FlopsPerToken:
    """Korthikanti et al. 2022, eq. 7 generalised to GQA, gated MLP and MoE: forward = 2 x matmul weights
    touched per token + 4 s h for attention scores and values, per layer; + 2 h V for the logits."""
    h, s = m.hidden, m.seq_len
    kvd = kv_dim(m)
    proj = 2 * (2 * h * h + 2 * h * kvd)                                   # Q, K, V, O
    dense_mlp = 2 * mlp_matrices(m) * h * m.ffn_hidden
    moe_mlp = 2 * mlp_matrices(m) * h * m.expert_ffn_hidden * (m.top_k + m.shared_experts) + 2 * h * m.experts
    dense_layers = m.layers - m.moe_layers
    mlp_avg = (dense_layers * dense_mlp + m.moe_layers * moe_mlp) / m.layers
    return FlopsPerToken(gemm_per_layer=proj + mlp_avg, attention_per_layer=4.0 * s * h, logits=2.0 * h * m.vocab)


def model_flops_per_step(m: ModelSpec, global_batch: int) -> float:
    """Model FLOPs of one optimizer step: forward + backward (2x forward) = 3 x forward, no recomputation
    (the MFU convention of Chowdhery et al. 2022, PaLM, appendix B)."""
    return 3.0 * flops_per_token(m).forward(m.layers) * global_batch * m.seq_len


def hardware_flops_per_step(m: ModelSpec, global_batch: int, recompute: str, full_share: float = 1.0) -> float:
    """FLOPs actually executed: full recomputation repeats the forward of every layer (not the logits), as in
    Narayanan et al. 2021, Eq. 3 (96 B s l h^2 (1 + s/6h + V/16lh)), or of `full_share` of them; selective
    repeats the attention core (Korthikanti et al. 2022, sec. 5)."""
    fpt = flops_per_token(m)
    extra = {"none": 0.0,
             "selective": fpt.attention_per_layer * m.layers,
             "full": full_share * (fpt.gemm_per_layer + fpt.attention_per_layer) * m.layers}[recompute]
    return model_flops_per_step(m, global_batch) + extra * global_batch * m.seq_len
