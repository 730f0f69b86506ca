#include "cuir/pipeline/candidates.h"

namespace cubridge::pipeline {

double CandidateScore(const nlohmann::json& candidate) {
  if (!candidate.value("passed", false)) return -1;
  if (!candidate.contains("profile")) return 0;
  return candidate["profile"].value("tflops_kept", 0.0);
}

int BestCandidate(const nlohmann::json& candidates) {
  int best = -1;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const double score = CandidateScore(candidates[i]);
    if (score >= 0 && (best < 0 || score > CandidateScore(candidates[best]))) {
      best = static_cast<int>(i);
    }
  }
  return best;
}

}  // namespace cubridge::pipeline
