// cubridge-gpu-runner: the child process that touches the GPU for one candidate.
//   cubridge-gpu-runner probe --result OUT.json
//   cubridge-gpu-runner check --request IN.json --result OUT.json
// Exit codes: 0 result written (verification passed or failed), 2 unusable request, 3 the
// candidate failed while running (CUDA error: the context is lost), 4 no usable GPU.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cuir/files/files.h"
#include "worker/gpu/device_check.h"

namespace {

int Finish(const std::string& path, const nlohmann::json& result, int code) {
  std::ofstream out(path);
  out << result.dump(2) << "\n";
  if (!out) {
    std::fprintf(stderr, "cubridge-gpu-runner: cannot write %s\n", path.c_str());
    return 2;
  }
  return code;
}

int Fail(const std::string& path, const absl::Status& s, int code) {
  std::fprintf(stderr, "cubridge-gpu-runner: %s\n", std::string(s.message()).c_str());
  return Finish(path, {{"ok", false}, {"error", std::string(s.message())}}, code);
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "", request_path, result_path;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--request") request_path = argv[i + 1];
    else if (flag == "--result") result_path = argv[i + 1];
  }
  if ((mode != "probe" && mode != "check") || result_path.empty() ||
      (mode == "check" && request_path.empty())) {
    std::fprintf(stderr,
                 "usage: cubridge-gpu-runner probe --result OUT.json\n"
                 "       cubridge-gpu-runner check --request IN.json --result OUT.json\n");
    return 2;
  }
  if (mode == "probe") {
    auto probed = cubridge::gpu::ProbeJson();
    if (!probed.ok()) return Fail(result_path, probed.status(), 4);
    (*probed)["ok"] = true;
    return Finish(result_path, *probed, 0);
  }
  const auto text = cubridge::files::ReadFile(request_path);
  auto parsed = nlohmann::json::parse(text.value_or(""), nullptr, false);
  if (!text.ok() || parsed.is_discarded()) {
    return Fail(result_path, absl::InvalidArgumentError("cannot read request " + request_path), 2);
  }
  auto request = cubridge::gpu::RunRequest::FromJson(parsed);
  if (!request.ok()) return Fail(result_path, request.status(), 2);
  absl::StatusOr<nlohmann::json> result;
  try {
    result = cubridge::gpu::CheckOnGpu(*request);
  } catch (const std::exception& e) {  // LibTorch reports CUDA faults as exceptions
    result = absl::InternalError(std::string("the candidate failed: ") + e.what());
  }
  if (!result.ok()) {
    const bool no_gpu = result.status().code() == absl::StatusCode::kFailedPrecondition;
    return Fail(result_path, result.status(), no_gpu ? 4 : 3);
  }
  (*result)["ok"] = true;
  return Finish(result_path, *result, 0);
}
