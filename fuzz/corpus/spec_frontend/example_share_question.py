"""FlashMask share-question: document 0 is a question every answer sees; answers are causal
within themselves and do not see each other. `doc` holds one document id per token."""
import torch
from torch import Tensor


def mask_mod(b, h, q_idx, kv_idx, doc: Tensor):
    sees_question = (doc[kv_idx] == 0) & (doc[q_idx] != 0)
    causal_same_doc = (q_idx >= kv_idx) & (doc[q_idx] == doc[kv_idx])
    return sees_question | causal_same_doc
