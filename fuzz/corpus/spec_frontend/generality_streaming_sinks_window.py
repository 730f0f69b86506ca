# StreamingLLM-style attention (Xiao et al. 2023): a causal sliding window whose size is read from
# a captured int64 tensor, win[0] (a server changes it without recompiling), plus pinned sink
# tokens at sinks[0] (BOS), sinks[1] and sinks[-1] (e.g. the end of the system prompt).
# Constant indices, a negative one included; attention-gym's sliding-window-with-sink pattern.
import torch


def mask_mod(b, h, q_idx, kv_idx, win, sinks):
    causal = q_idx >= kv_idx
    in_window = q_idx - kv_idx < win[0]
    is_sink = (kv_idx == sinks[0]) | (kv_idx == sinks[1]) | (kv_idx == sinks[-1])
    return causal & (in_window | is_sink)
