// Submits a spec file to the CuBridge coordinator, prints the job's stages as they finish and
// where the verified kernel is. The coordinator and the token come from the environment:
// CUBRIDGE_ADDRESS, CUBRIDGE_TOKEN or CUBRIDGE_TOKEN_FILE, CUBRIDGE_TLS_CA.
//
//   submit_and_wait examples/specs/causal.py
#include <cstdio>
#include <iostream>

#include <cubridge/client.h>

int Fail(const absl::Status& status) {
  std::cerr << "submit_and_wait: " << status << "\n";
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: submit_and_wait SPEC.py\n";
    return 2;
  }
  auto options = cubridge::ClientOptions::FromEnvironment();
  if (!options.ok()) return Fail(options.status());
  auto client = cubridge::Client::Connect(*options);
  if (!client.ok()) return Fail(client.status());

  auto request = cubridge::RequestFromSpecFile(argv[1]);
  if (!request.ok()) return Fail(request.status());
  auto& config = *request->mutable_config();  // Llama-3-70B-like GQA; archs: every registered one
  config.set_heads_q(64);
  config.set_heads_kv(8);
  config.set_head_dim(128);
  config.set_seqlen_q(4096);
  config.set_seqlen_kv(4096);
  config.set_dtype("bf16");

  auto job = (*client)->Submit(*request);
  if (!job.ok()) return Fail(job.status());
  std::cout << "job " << job->job_id() << (job->cache_hit() ? " (cache hit)" : "") << "\n";

  auto done = (*client)->Watch(job->job_id(), [](const cubridge::v1::StageEvent& e) {
    std::printf("[%-8s] %-4s %7.3fs  %s\n", e.stage().c_str(), e.ok() ? "ok" : "FAIL", e.seconds(),
                e.detail().c_str());
  });
  if (!done.ok()) return Fail(done.status());
  if (done->state() != cubridge::v1::JOB_STATE_SUCCEEDED) {
    std::cerr << "job " << done->job_id() << " " << cubridge::v1::JobState_Name(done->state())
              << ": " << done->error() << "\n";
    return 1;
  }
  // The verified kernel stays in the service's cache under (spec hash, arch).
  std::cout << "kernel: spec " << done->spec_hash() << " in the service's cache; fetch it with "
            << "Client::GetKernel(spec_hash, arch) or `cubridge-cli get " << done->job_id()
            << " -o DIR`\n";
  return 0;
}
