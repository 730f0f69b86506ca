"""Writes the torch.save files tests/spec/torch_save_test.cc reads (PyTorch's own writer, as users
run it). Run from this folder with a PyTorch of 1.6 or later: python3 make_files.py

good/: one tensor each, every buffer dtype, ranks 0 to 4, views (transposed, offset into a larger
storage, stepped, broadcast with stride 0, empty), and one file pickled with protocol 4.
bad/: what the reader must refuse, each with what its message names.
"""
import os

import torch

torch.manual_seed(7)
os.makedirs("good", exist_ok=True)
os.makedirs("bad", exist_ok=True)


def save(folder, name, obj, **kw):
    torch.save(obj, os.path.join(folder, name + ".pt"), **kw)


base = torch.arange(120, dtype=torch.float32).reshape(2, 3, 4, 5)
good = {
    "float32_r0": torch.tensor(2.5),
    "float32_r2_transposed": torch.randn(3, 5).t(),
    "float32_r4_permuted": base.permute(3, 1, 0, 2),
    "float32_r2_empty": torch.zeros(0, 3),
    "int64_r1_offset": torch.arange(40, dtype=torch.int64)[17:29],
    "int64_r3_stepped": torch.arange(4 * 6 * 8, dtype=torch.int64).reshape(4, 6, 8)[1:, ::2, 3::3],
    "int32_r2": torch.randint(-(2**31), 2**31 - 1, (3, 7), dtype=torch.int32),
    "int32_r4_broadcast": torch.arange(3, dtype=torch.int32).reshape(1, 3, 1, 1).expand(2, 3, 2, 4),
    "bool_r0": torch.tensor(True),
    "bool_r2": torch.rand(6, 5) > 0.5,
    "bfloat16_r1": torch.randn(9).to(torch.bfloat16),
    "bfloat16_r3_transposed": torch.randn(2, 3, 4).to(torch.bfloat16).transpose(0, 2),
    "float16_r2_offset": torch.randn(10, 10).half()[3:7, 2:5],
    "float16_r4": torch.randn(2, 1, 3, 2).half(),
    "slopes_float32_4": torch.tensor([0.5, 0.25, 0.125, 0.0625]),
    "slopes_float32_2": torch.tensor([0.5, 0.25]),
}
for name, t in good.items():
    save("good", name, t)
save("good", "int64_r2_protocol4", torch.arange(6, dtype=torch.int64).reshape(2, 3), pickle_protocol=4)

save("bad", "float64", torch.randn(3, dtype=torch.float64))
save("bad", "uint8", torch.arange(4, dtype=torch.uint8))
save("bad", "dict", {"a": torch.zeros(2)})
save("bad", "two_tensors", (torch.zeros(2), torch.ones(2)))
save("bad", "parameter", torch.nn.Parameter(torch.zeros(2)))
save("bad", "rank5", torch.zeros(1, 2, 1, 2, 1))
save("bad", "legacy", torch.zeros(3), _use_new_zipfile_serialization=False)
save("bad", "int", 7)
