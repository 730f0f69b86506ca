// Grid schedules: the order in which the points of a `grid` are launched (`grid ... schedule
// NAME`). A schedule is a map from the hardware's linear CTA id (the first grid axis fastest) to
// a grid point, as an expert kernel's tile scheduler computes it (cuir/experts/*/scheduler.cuh).
// A schedule never changes results: every grid point writes its own output rows. The validator
// accepts only the names listed here; the interpreter visits grid points in this order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cubridge::cuir {

struct GridSchedule {
  absl::string_view name;
  absl::string_view order;  // one phrase for docs and error messages
  // Maps a launch coordinate (blockIdx, the first axis fastest) to the grid point it runs,
  // in place.
  void (*point)(const std::vector<int64_t>& extents, std::vector<int64_t>* coord);
};

// The name a grid without `schedule` has.
inline constexpr absl::string_view kDefaultSchedule = "linear";

// Every known schedule, the default (`linear`) first.
const std::vector<GridSchedule>& GridSchedules();
// The schedule called `name` ("" is the default); null when no schedule has that name.
const GridSchedule* FindGridSchedule(absl::string_view name);
// "linear (...) and longest_first (...)": the known names with their orders, for errors.
std::string DescribeGridSchedules();

// Every point of a grid with these extents, in the launch order of `schedule` ("" = linear).
// An axis of extent 0 gives no points. INVALID_ARGUMENT for an unknown schedule or a negative
// extent.
absl::StatusOr<std::vector<std::vector<int64_t>>> GridOrder(absl::string_view schedule,
                                                            const std::vector<int64_t>& extents);

}  // namespace cubridge::cuir
