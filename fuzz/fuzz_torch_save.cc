// The torch.save reader (cuir/files/torch_save.h) on arbitrary bytes: cubridge-cli runs it on a
// user's file, so it may only answer. The first byte's low bit turns the CRC check off, so that
// mutated pickles and storages reach the pickle machine and the view gathering instead of
// stopping at the checksum; the rest is the file.
// Oracles besides not crashing: every refusal is INVALID_ARGUMENT, an accepted tensor is a whole
// value (cuir::CheckTensorValue: rank, sizes, bytes, bools), and the same bytes read the same.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "cuir/files/torch_save.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cubridge;
  if (size == 0) return 0;
  files::TorchSaveOptions options;
  options.check_crc = (data[0] & 1) == 0;
  // Views of few stored elements may ask for many (strides of 0): the limit is what keeps that
  // to an error; a small one keeps the fuzzer's memory small.
  options.max_bytes = int64_t{16} << 20;
  const absl::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto value = files::ParseTorchSave(bytes, "fuzz.pt", options);
  if (!value.ok()) {
    if (value.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  if (!cuir::CheckTensorValue(*value, "fuzz.pt").ok()) std::abort();
  auto again = files::ParseTorchSave(bytes, "fuzz.pt", options);
  if (!again.ok() || again->data != value->data || again->shape != value->shape ||
      again->dtype != value->dtype) {
    std::abort();
  }
  return 0;
}
