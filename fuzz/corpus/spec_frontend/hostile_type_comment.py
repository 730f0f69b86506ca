def f(x):
    # type: ((((((((((((((((((((((((((((((((((((((((
    return x
def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
