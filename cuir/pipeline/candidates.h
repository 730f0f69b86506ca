// Tile candidates, as the GPU stage reports them (verify, then profile), ranked the same way by
// `adapt --local`'s autotuner, the worker that checks one and the coordinator that picks one.
#pragma once

#include <nlohmann/json.hpp>

namespace cubridge::pipeline {

// -1 failed, 0 verified but not profiled, else its TFLOP/s on kept elements.
double CandidateScore(const nlohmann::json& candidate);
// The index of the best candidate of a JSON array of them (the first of equals), -1 when none
// verified.
int BestCandidate(const nlohmann::json& candidates);

}  // namespace cubridge::pipeline
