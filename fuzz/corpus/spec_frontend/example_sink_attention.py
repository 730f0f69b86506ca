"""Softmax with an attention sink.

Every query row's softmax gets one extra logit, `sink`, in the same scaled-score domain as
q.k * scale. It takes probability mass but contributes no value (its value row is zero), so rows
may attend to "nothing" (the sink logits of StreamingLLM- and gpt-oss-style models):

    O   = softmax([S, sink]) @ [V; 0]
    LSE = logsumexp([S, sink])           with S = Q K^T * scale

mask_mod / score_mod cannot add a column to the softmax, so this spec gives the whole attention as
`reference`. The transfer rules do not cover it; the LLM proposer (`--proposer llm` or `hybrid`)
writes the CuIR program. examples/llm/sink_attention.cuir is the program it is expected to write:
the sm_80 base program with the GQA head mapping and `epilogue sink sink`.

q is [B, Hq, Sq, D], k and v are [B, Hkv, Skv, D]: with GQA each kv head serves Hq // Hkv query
heads, so the function repeats k and v itself. Override the sink with `--param sink=1.5`.
"""
import torch


def reference(q, k, v, scale: float, sink: float = 0.5):
    group = q.size(1) // k.size(1)
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    sink_column = torch.full_like(scores.narrow(-1, 0, 1), sink)
    lse = torch.logsumexp(torch.cat([scores, sink_column], dim=-1), dim=-1)
    probs = torch.exp(scores - lse.unsqueeze(-1))
    return torch.matmul(probs, v), lse
