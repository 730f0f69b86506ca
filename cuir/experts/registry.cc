// The experts CuBridge adapts, one line each (their descriptors live in their folders).
#include "cuir/experts/expert.h"

namespace cubridge::experts {

extern const Expert kFa2Sm80;  // fa2_sm80/descriptor.cc
extern const Expert kFa3Sm90;  // fa3_sm90/descriptor.cc

const std::vector<const Expert*>& Registry() {
  static const std::vector<const Expert*> experts = {&kFa2Sm80, &kFa3Sm90};
  return experts;
}

}  // namespace cubridge::experts
