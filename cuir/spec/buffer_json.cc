#include "cuir/spec/buffer_json.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace cubridge::spec {

nlohmann::json TensorHeaderJson(cuir::TensorDType dtype, const std::vector<int64_t>& shape) {
  return {{"dtype", cuir::TensorDTypeName(dtype)}, {"shape", shape}};
}

absl::StatusOr<cuir::TensorValue> TensorHeaderFromJson(const nlohmann::json& j, const std::string& what) {
  cuir::TensorValue v;
  if (!j.is_object() || !j.contains("dtype") || !j["dtype"].is_string() || !j.contains("shape") ||
      !j["shape"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": a tensor value needs a dtype and a shape"));
  }
  const auto dtype = cuir::TensorDTypeFromName(j["dtype"].get<std::string>());
  if (!dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": unknown dtype `", j["dtype"].get<std::string>(), "`"));
  }
  v.dtype = *dtype;
  for (const auto& d : j["shape"]) {
    if (!d.is_number_integer()) return absl::InvalidArgumentError(absl::StrCat(what, ": a size is not an integer"));
    v.shape.push_back(d.get<int64_t>());
  }
  if (auto n = cuir::TensorElements(v.shape, what); !n.ok()) return n.status();
  return v;
}

nlohmann::json BufferSourcesJson(const std::map<std::string, BufferSource>& sources) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, src] : sources) {
    if (!src.value) {
      out[name] = src.spec;
      continue;
    }
    nlohmann::json v = TensorHeaderJson(src.value->dtype, src.value->shape);
    v["data_base64"] = absl::Base64Escape(src.value->data);
    out[name] = std::move(v);
  }
  return out;
}

absl::StatusOr<std::map<std::string, BufferSource>> BufferSourcesFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("buffers: not an object of NAME -> source");
  std::map<std::string, BufferSource> out;
  for (const auto& [name, src] : j.items()) {
    const std::string what = absl::StrCat("buffer `", name, "`");
    if (src.is_string()) {
      out[name].spec = src.get<std::string>();
      continue;
    }
    auto v = TensorHeaderFromJson(src, what);
    if (!v.ok()) return v.status();
    if (!src.contains("data_base64") || !src["data_base64"].is_string() ||
        !absl::Base64Unescape(src["data_base64"].get<std::string>(), &v->data)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": its value has no data_base64 (base64 bytes)"));
    }
    if (auto s = cuir::CheckTensorValue(*v, what); !s.ok()) return s;
    out[name] = BufferSource::Of(*std::move(v));
  }
  return out;
}

}  // namespace cubridge::spec
