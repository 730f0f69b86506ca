// report.json: one kernel's account (what spec, which rules, how it was verified, what was
// lowered, which candidate won, what the LLM cost) in one shape, whether `adapt --local` or the
// service's coordinator made the kernel. Both fill this struct; its JSON has every key always
// (docs/architecture.md lists them), so a reader never asks which of the two wrote it.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"

namespace cubridge::pipeline {

struct KernelReport {
  std::string spec;            // the spec file's name
  std::string spec_hash;
  std::string canonical_form;  // what spec_hash hashes (docs/spec.md)
  std::string ruleset;
  std::string arch;            // sm_80, sm_90
  std::string expert;
  nlohmann::json config = nlohmann::json::object();
  std::string proposer;        // rules, llm, hybrid
  nlohmann::json transfer = nlohmann::json::array();      // the applied rules
  nlohmann::json verification = nlohmann::json::object(); // the CPU/IR-level verification
  std::string verification_level;                         // "gpu" or "ir"
  nlohmann::json lowering = nlohmann::json::object();     // entry point, regions, buffers
  // The candidates and the best: on a GPU, each verified and profiled there; otherwise
  // {"skipped": why} (the service at level ir adds its compiled candidates).
  nlohmann::json gpu = nlohmann::json::object();
  nlohmann::json llm;          // the LLM's usage, null when the rules transferred alone
  nlohmann::json stages = nlohmann::json::array();  // adapt's stages; the service's are its job's events
  bool cache_hit = false;
  std::string job_id;          // the service's job that made it; empty for adapt --local
  // Each buffer of the spec -> its canonical name: marks lowering.buffers (MarkCanonicalBuffers).
  std::map<std::string, std::string> canonical_buffers;

  nlohmann::json ToJson() const;
};

// Renames a report's kernel buffers to the names `canonical` (this spec's name -> canonical
// name, spec::CanonicalBufferNames) gives their canonical names: the kernel's argument order
// stays, the names become this spec's. A report from before canonical names keeps its names if
// this spec declares them all; otherwise FAILED_PRECONDITION (which buffer is which cannot be
// told).
absl::Status BindBuffers(nlohmann::json* report, const std::map<std::string, std::string>& canonical);

}  // namespace cubridge::pipeline
