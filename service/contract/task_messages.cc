#include "service/contract/task_messages.h"

#include <algorithm>
#include <cmath>

#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "cuir/spec/digest.h"
#include "service/contract/task_contract.h"

namespace cubridge::contract {

using nlohmann::json;
namespace pb = google::protobuf;

absl::StatusOr<cuir::AttentionConfig> PayloadConfigFromProto(const v1::AttentionConfig& p) {
  const std::pair<const char*, bool> sizes[] = {
      {"batch", p.has_batch()},       {"heads_q", p.has_heads_q()},   {"heads_kv", p.has_heads_kv()},
      {"head_dim", p.has_head_dim()}, {"seqlen_q", p.has_seqlen_q()}, {"seqlen_kv", p.has_seqlen_kv()}};
  for (const auto& [name, set] : sizes) {
    if (!set) return absl::InvalidArgumentError(absl::StrCat("task payload: config.", name, " is not set"));
  }
  if (p.dtype() != "bf16" && p.dtype() != "fp16") {
    return absl::InvalidArgumentError(
        absl::StrCat("task payload: config.dtype must be \"bf16\" or \"fp16\", got \"", p.dtype(), "\""));
  }
  cuir::AttentionConfig c;
  c.batch = p.batch();
  c.heads_q = p.heads_q();
  c.heads_kv = p.heads_kv();
  c.head_dim = p.head_dim();
  c.seqlen_q = p.seqlen_q();
  c.seqlen_kv = p.seqlen_kv();
  c.dtype = p.dtype() == "bf16" ? cuir::DType::kBF16 : cuir::DType::kFP16;
  c.softmax_scale = p.softmax_scale();
  if (auto s = cuir::ValidateConfig(c); !s.ok()) return s;
  return c;
}

v1::SpecInput SpecInputToProto(const SpecInput& in) {
  v1::SpecInput p;
  p.set_file_name(in.file_name);
  p.set_source(in.source);
  for (const std::string& param : in.params) p.add_params(param);
  for (const auto& [name, source] : in.buffers) (*p.mutable_buffers())[name] = source;
  for (const auto& [name, t] : in.tensors) {
    v1::TensorRef& r = (*p.mutable_tensors())[name];
    r.set_dtype(TensorDTypeToProto(t.dtype));
    for (int64_t d : t.shape) r.add_shape(d);
    r.set_sha256(t.sha256);
  }
  *p.mutable_config() = ConfigToProto(in.config);
  p.set_seed(in.seed);
  return p;
}

namespace {

absl::Status Missing(const std::string& name, const std::string& digest) {
  return absl::NotFoundError(absl::StrCat(
      "buffer `", name, "`: its values (sha256 ", digest.substr(0, 16), "...) are no longer "
      "stored (they expire --job-retention-seconds after the last job using them advanced); "
      "submit the job again"));
}

}  // namespace

absl::Status CheckTensors(const v1::TaskPayload& payload, const TensorLookup& lookup) {
  const v1::SpecInput* spec = SpecOf(payload);
  if (spec == nullptr) return absl::OkStatus();
  for (const auto& [name, r] : spec->tensors()) {
    const std::string* bytes = lookup ? lookup(r.sha256()) : nullptr;
    if (bytes == nullptr) return Missing(name, r.sha256());
    if (spec::Sha256Hex(*bytes) != r.sha256()) {
      return absl::DataLossError(absl::StrCat("buffer `", name, "`: the values that came with the "
                                              "task do not match their sha256 ", r.sha256()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SpecInput> SpecInputFromProto(const v1::SpecInput& p, const TensorLookup& lookup) {
  SpecInput in;
  in.file_name = p.file_name();
  in.source = p.source();
  in.params.assign(p.params().begin(), p.params().end());
  in.buffers = {p.buffers().begin(), p.buffers().end()};
  for (const auto& [name, r] : p.tensors()) {
    const auto dtype = TensorDTypeFromProto(r.dtype());
    if (!dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat("task payload: buffer `", name, "` has no dtype (code ", r.dtype(), ")"));
    }
    TensorRef t{*dtype, {r.shape().begin(), r.shape().end()}, r.sha256(), std::nullopt};
    const std::string* bytes = lookup ? lookup(r.sha256()) : nullptr;
    if (bytes == nullptr) return Missing(name, r.sha256());
    t.data = *bytes;
    in.tensors[name] = std::move(t);
  }
  auto config = PayloadConfigFromProto(p.config());
  if (!config.ok()) return config.status();
  in.config = *config;
  in.seed = p.seed();
  return in;
}

const v1::SpecInput* SpecOf(const v1::TaskPayload& payload) {
  switch (payload.kind_case()) {
    case v1::TaskPayload::kLift: return &payload.lift().spec();
    case v1::TaskPayload::kTransfer: return &payload.transfer().spec();
    case v1::TaskPayload::kCandidate: return &payload.candidate().spec();
    case v1::TaskPayload::kLiftLlm: return &payload.lift_llm().spec();
    case v1::TaskPayload::kBackward: return &payload.backward().spec();
    case v1::TaskPayload::KIND_NOT_SET: break;
  }
  return nullptr;
}

std::vector<std::string> TensorDigests(const v1::TaskPayload& payload) {
  std::vector<std::string> out;
  if (const v1::SpecInput* spec = SpecOf(payload)) {
    for (const auto& [name, r] : spec->tensors()) out.push_back(r.sha256());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

v1::TaskPayload::KindCase PayloadCaseOf(const std::string& kind) {
  if (kind == kLiftTask) return v1::TaskPayload::kLift;
  if (kind == kTransferTask) return v1::TaskPayload::kTransfer;
  if (kind == kCandidateTask) return v1::TaskPayload::kCandidate;
  if (kind == kLiftLlmTask) return v1::TaskPayload::kLiftLlm;
  if (kind == kBackwardTask) return v1::TaskPayload::kBackward;
  return v1::TaskPayload::KIND_NOT_SET;
}

v1::TaskResult::KindCase ResultCaseOf(const std::string& kind) {
  // The two oneofs number their members alike.
  return static_cast<v1::TaskResult::KindCase>(static_cast<int>(PayloadCaseOf(kind)));
}

// What every kind's result has: how long it took, what it says, the LLM conversation's cost.
double ResultSeconds(const v1::TaskResult& r) {
  switch (r.kind_case()) {
    case v1::TaskResult::kLift: return r.lift().seconds();
    case v1::TaskResult::kTransfer: return r.transfer().seconds();
    case v1::TaskResult::kCandidate: return r.candidate().seconds();
    case v1::TaskResult::kLiftLlm: return r.lift_llm().seconds();
    case v1::TaskResult::kBackward: return r.backward().seconds();
    case v1::TaskResult::KIND_NOT_SET: break;
  }
  return 0;
}

std::string ResultDetail(const v1::TaskResult& r) {
  switch (r.kind_case()) {
    case v1::TaskResult::kLift: return r.lift().detail();
    case v1::TaskResult::kTransfer: return r.transfer().detail();
    case v1::TaskResult::kCandidate: return r.candidate().detail();
    case v1::TaskResult::kLiftLlm: return r.lift_llm().detail();
    case v1::TaskResult::kBackward: return r.backward().detail();
    case v1::TaskResult::KIND_NOT_SET: break;
  }
  return "";
}

const v1::LlmUsage& ResultUsage(const v1::TaskResult& r) {
  return r.has_transfer() ? r.transfer().llm_usage() : r.lift_llm().llm_usage();
}

const pb::ListValue& ResultTranscript(const v1::TaskResult& r) {
  return r.has_transfer() ? r.transfer().transcript() : r.lift_llm().transcript();
}

std::string StoreText(const pb::Message& m) {
  pb::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  std::string out;
  // Printing a message of a compiled type cannot fail.
  (void)pb::util::MessageToJsonString(m, &out, o);
  return out;
}

absl::StatusOr<v1::TaskPayload> PayloadFromStore(const std::string& text) {
  v1::TaskPayload p;
  if (auto s = pb::util::JsonStringToMessage(text, &p); !s.ok() || p.kind_case() == v1::TaskPayload::KIND_NOT_SET) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the task's stored payload is not a TaskPayload (written by a coordinator older than the "
        "typed task messages?): submit the job again",
        s.ok() ? "" : absl::StrCat(" (", s.ToString(), ")")));
  }
  return p;
}

absl::StatusOr<v1::TaskResult> ResultFromStore(const std::string& kind, const std::string& text) {
  const v1::TaskResult::KindCase want = ResultCaseOf(kind);
  if (want == v1::TaskResult::KIND_NOT_SET) {
    return absl::InvalidArgumentError(absl::StrCat("unknown task kind \"", kind, "\""));
  }
  v1::TaskResult r;
  const pb::FieldDescriptor* member = r.GetDescriptor()->FindFieldByNumber(static_cast<int>(want));
  pb::Message* of_kind = r.GetReflection()->MutableMessage(&r, member);  // sets the member
  if (text.empty()) return r;
  pb::util::JsonParseOptions o;
  o.ignore_unknown_fields = true;  // keys of earlier versions that have no field now
  v1::TaskResult wrapped;
  if (pb::util::JsonStringToMessage(text, &wrapped, o).ok() &&
      wrapped.kind_case() != v1::TaskResult::KIND_NOT_SET) {
    if (wrapped.kind_case() != want) {
      return absl::InvalidArgumentError(absl::StrCat("a ", kind, " task's stored result is of another kind"));
    }
    return wrapped;
  }
  if (auto s = pb::util::JsonStringToMessage(text, of_kind, o); !s.ok()) {
    return absl::DataLossError(absl::StrCat("a ", kind, " task's stored result is unreadable: ", s.ToString()));
  }
  return r;
}

namespace {

pb::Value ToValue(const json& j) {
  pb::Value v;
  switch (j.type()) {
    case json::value_t::null:
    case json::value_t::discarded: v.set_null_value(pb::NULL_VALUE); break;
    case json::value_t::boolean: v.set_bool_value(j.get<bool>()); break;
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: v.set_number_value(j.get<double>()); break;
    case json::value_t::string: v.set_string_value(j.get<std::string>()); break;
    case json::value_t::array: *v.mutable_list_value() = ToList(j); break;
    case json::value_t::object: *v.mutable_struct_value() = ToStruct(j); break;
    case json::value_t::binary: v.set_null_value(pb::NULL_VALUE); break;  // JSON has none
  }
  return v;
}

json FromValue(const pb::Value& v) {
  switch (v.kind_case()) {
    case pb::Value::kBoolValue: return v.bool_value();
    case pb::Value::kNumberValue: {
      // Counts and sizes went in as integers; a Struct keeps every number as a double.
      const double d = v.number_value();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9007199254740992.0) {
        return static_cast<int64_t>(d);
      }
      return d;
    }
    case pb::Value::kStringValue: return v.string_value();
    case pb::Value::kListValue: return ToJson(v.list_value());
    case pb::Value::kStructValue: return ToJson(v.struct_value());
    case pb::Value::kNullValue:
    case pb::Value::KIND_NOT_SET: break;
  }
  return nullptr;
}

}  // namespace

pb::Struct ToStruct(const json& object) {
  pb::Struct s;
  if (!object.is_object()) return s;
  for (const auto& [key, value] : object.items()) (*s.mutable_fields())[key] = ToValue(value);
  return s;
}

pb::ListValue ToList(const json& array) {
  pb::ListValue l;
  if (!array.is_array()) return l;
  for (const json& value : array) *l.add_values() = ToValue(value);
  return l;
}

json ToJson(const pb::Struct& s) {
  json out = json::object();
  for (const auto& [key, value] : s.fields()) out[key] = FromValue(value);
  return out;
}

json ToJson(const pb::ListValue& l) {
  json out = json::array();
  for (const pb::Value& value : l.values()) out.push_back(FromValue(value));
  return out;
}

v1::LlmUsage UsageToProto(const json& usage) {
  v1::LlmUsage u;
  if (!usage.is_object()) return u;
  auto number = [&](const char* key) -> const json* {
    auto it = usage.find(key);
    return it != usage.end() && it->is_number() ? &*it : nullptr;
  };
  if (auto it = usage.find("model"); it != usage.end() && it->is_string()) u.set_model(it->get<std::string>());
  if (const json* n = number("requests")) u.set_requests(n->get<int32_t>());
  if (const json* n = number("prompt_tokens")) u.set_prompt_tokens(n->get<int64_t>());
  if (const json* n = number("completion_tokens")) u.set_completion_tokens(n->get<int64_t>());
  if (const json* n = number("cost_usd")) u.set_cost_usd(n->get<double>());
  return u;
}

json ToJson(const v1::LlmUsage& u) {
  if (u.requests() == 0 && u.model().empty()) return nullptr;
  return {{"model", u.model()},
          {"requests", u.requests()},
          {"prompt_tokens", u.prompt_tokens()},
          {"completion_tokens", u.completion_tokens()},
          {"cost_usd", u.cost_usd()}};
}

}  // namespace cubridge::contract
