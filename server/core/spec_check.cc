#include "server/core/spec_check.h"

#include <exception>

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "cuir/spec/spec.h"
#include "cuir/spec/tensors.h"
#include "server/core/request.h"
#include "server/core/spec_checker.h"

namespace cubridge::core {
namespace {

v1::SpecCheckResponse Refused(const absl::Status& s) {
  v1::SpecCheckResponse r;
  r.set_code(static_cast<int>(s.code()));
  r.set_message(std::string(s.message()));
  return r;
}

v1::SpecCheckResponse Check(const v1::SpecCheckRequest& in) {
  const v1::SubmitJobRequest& r = in.request();
  const std::string file = r.spec().file_name().empty() ? "spec.py" : r.spec().file_name();
  std::map<std::string, spec::BufferSource> sources;
  for (const auto& [name, source] : r.spec().buffers()) sources[name] = spec::BufferSource{source};
  // Values come without their bytes (SpecChecker sends dtypes and shapes): they are checked below
  // from those alone.
  for (const auto& [name, t] : r.spec().tensors()) {
    auto v = TensorValueFromProto(t, absl::StrCat("buffer '", name, "'"));
    if (!v.ok()) return Refused(v.status());
    sources[name] = spec::BufferSource::Of(*std::move(v));
  }
  auto dtypes = spec::BufferDTypesOf(sources);
  if (!dtypes.ok()) return Refused(absl::InvalidArgumentError(dtypes.status().message()));
  auto spec = spec::LoadSpecSource(r.spec().source(), file, *dtypes);
  if (!spec.ok()) return Refused(absl::InvalidArgumentError(spec.status().message()));
  std::vector<std::string> overrides;
  for (const auto& [name, value] : r.spec().params()) overrides.push_back(name + "=" + value);
  if (auto s = spec::OverrideParams(*spec, overrides); !s.ok()) {
    return Refused(absl::InvalidArgumentError(s.message()));
  }
  for (const auto& [name, source] : sources) {
    bool known = false;
    for (const auto& b : spec->buffers) known = known || b.name == name;
    if (!known) {
      return Refused(absl::InvalidArgumentError(absl::StrCat(
          file, ": buffer '", name, "' is given values but the spec declares no such buffer")));
    }
  }
  // The config was checked by the coordinator (CheckRequest) before the spec came here.
  auto config = ConfigFromProto(r.config());
  if (!config.ok()) return Refused(config.status());
  // A value of the wrong rank or too small for the job is refused now, as `adapt --local` would
  // refuse its tensor file; sources are read by the workers (they may be big to make).
  if (auto s = spec::CheckBufferValueShapes(*spec, *config, sources); !s.ok()) {
    return Refused(absl::InvalidArgumentError(s.message()));
  }
  v1::SpecCheckResponse out;
  out.set_spec_hash(spec::SpecHash(*spec, *config, in.ruleset()));
  out.set_canonical_form(spec::CanonicalForm(*spec, *config, in.ruleset()));
  for (const auto& [name, canonical] : spec::CanonicalBufferNames(*spec)) {
    (*out.mutable_canonical_buffers())[name] = canonical;
  }
  return out;
}

}  // namespace

v1::SpecCheckResponse CheckSpec(const v1::SpecCheckRequest& request) {
  try {
    return Check(request);
  } catch (const std::exception& e) {
    // The frontend turns LibTorch's errors into statuses; anything that still escapes is a bug
    // of ours, reported as one rather than blamed on the spec.
    return Refused(absl::InternalError(absl::StrCat("the spec frontend threw: ", e.what())));
  }
}

int RunSpecCheckChild(int fd, int max_seconds) {
  // One spec at a time, each a few operations per element: threads would only cost memory.
  torch::set_num_threads(1);
  return ServeSpecChecks(fd, max_seconds, CheckSpec);
}

}  // namespace cubridge::core
