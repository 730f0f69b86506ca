#include "cuir/ir/tensor_value.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuir/ir/expr.h"

namespace cubridge::cuir {
namespace {

constexpr int64_t kMaxElements = int64_t{1} << 40;

std::string Dims(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

absl::StatusOr<int64_t> TensorElements(const std::vector<int64_t>& shape, absl::string_view what) {
  if (shape.size() > kMaxBufferRank) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": rank ", shape.size(), " (shape ", Dims(shape),
        "); captured tensors have rank 0 to ", kMaxBufferRank));
  }
  int64_t n = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": size ", shape[d], " of dimension ", d,
                                                     " is negative; sizes are 0 or more"));
    }
    // Checked before multiplying: n <= 2^40 and shape[d] <= 2^40 cannot overflow int64 together,
    // and a larger size alone is already over the limit.
    if (shape[d] > kMaxElements || (shape[d] > 0 && n > kMaxElements / shape[d])) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": shape ", Dims(shape),
          " has more than 2^40 elements"));
    }
    n *= shape[d];
  }
  return n;
}

absl::Status CheckTensorData(TensorDType dtype, const std::vector<int64_t>& shape,
                             absl::string_view data, absl::string_view what) {
  auto n = TensorElements(shape, what);
  if (!n.ok()) return n.status();
  const int64_t elem = TensorDTypeBytes(dtype);
  const int64_t want = *n * elem;
  if (static_cast<int64_t>(data.size()) != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", data.size(), " bytes of data for ", TensorValueText(dtype, shape), ", which takes ",
        *n, " x ", elem, " = ", want, " bytes (row-major, contiguous, ", elem,
        elem == 1 ? " byte" : " bytes", " per element)"));
  }
  if (dtype == TensorDType::kBool) {
    for (size_t i = 0; i < data.size(); ++i) {
      const unsigned char b = static_cast<unsigned char>(data[i]);
      if (b > 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": bool element #", i, " is the byte ", static_cast<int>(b),
            "; a bool is one byte, 0 (false) or 1 (true)"));
      }
    }
  }
  return absl::OkStatus();
}

std::string TensorValueText(TensorDType dtype, const std::vector<int64_t>& shape) {
  return absl::StrCat(TensorDTypeName(dtype), Dims(shape));
}

}  // namespace cubridge::cuir
