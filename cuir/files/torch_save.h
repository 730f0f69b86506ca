// Reads one tensor from a file torch.save wrote (PyTorch 1.6 or later: the zip format), without
// LibTorch, for cubridge-cli's service commands. The archive holds `<prefix>/data.pkl`, a pickle
// (protocol 2 as torch.save writes it; 3 and 4 are read too) that calls
// torch._utils._rebuild_tensor_v2 on a persistent storage id ('storage', torch.<X>Storage, key,
// location, numel) with the storage offset, sizes and strides, and `<prefix>/data/<key>`, the
// storage's raw little-endian bytes. Views are resolved: the result is the tensor's elements
// row-major and contiguous, whatever its strides and offset.
//
// The file is a user's: every length, offset, index and stride is checked, and anything else
// (another object than one tensor, an unsupported dtype, a rank over 4, a compressed or cut-short
// archive, a pickle opcode torch.save does not write) is INVALID_ARGUMENT naming the file, what is
// wrong and how to save a file that is read.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cuir/ir/tensor_value.h"

namespace cubridge::files {

struct TorchSaveOptions {
  // Check each entry's bytes against the CRC-32 its directory gives (a corrupted file is named
  // as such). The fuzz target turns it off now and then to reach the pickle reader.
  bool check_crc = true;
  // The most bytes the tensor's elements may take once gathered. A view with strides of 0 (an
  // expanded tensor) may take far more than its file; 1 GiB is more than the service takes in one
  // request (coordinator --max-tensor-mb, at most 1024).
  int64_t max_bytes = int64_t{1} << 30;
  // The most elements (a spec's buffers: 2^31, cuir/spec/tensors.cc's kMaxBufferElements),
  // refused before any is gathered.
  int64_t max_elements = int64_t{1} << 40;
};

absl::StatusOr<cuir::TensorValue> ParseTorchSave(absl::string_view bytes, absl::string_view file,
                                                 const TorchSaveOptions& options = {});

// ReadFile + ParseTorchSave; NOT_FOUND when the file cannot be read.
absl::StatusOr<cuir::TensorValue> ReadTorchSaveFile(const std::string& path,
                                                    const TorchSaveOptions& options = {});

}  // namespace cubridge::files
