"""Brackets in text: ((((( [[[[ {{{{ - - - -"""
def mask_mod(b, h, q_idx, kv_idx):
    # ((((((((((((((((((((((((((((((((((((((((
    s = '(((((\'((((('
    return (q_idx >= kv_idx) & (q_idx - kv_idx <= 128)
