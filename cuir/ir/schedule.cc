#include "cuir/ir/schedule.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cubridge::cuir {
namespace {

// Points in grid order: the launch coordinate is the point.
void LinearPoint(const std::vector<int64_t>&, std::vector<int64_t>*) {}

// The first axis (the query tile) from its last value to its first, the others as linear: under
// causal-like masks the last query tiles visit the most KV blocks, so they start first and the
// short ones fill the tail of the wave (fa3_sm90/scheduler.cuh, LongestFirst).
void LongestFirstPoint(const std::vector<int64_t>& extents, std::vector<int64_t>* coord) {
  if (!coord->empty()) (*coord)[0] = extents[0] - 1 - (*coord)[0];
}

}  // namespace

const std::vector<GridSchedule>& GridSchedules() {
  static const std::vector<GridSchedule> kSchedules = {
      {kDefaultSchedule, "the default: every axis ascending, the first axis fastest",
       LinearPoint},
      {"longest_first",
       "as linear, but the first axis, the query tile, descending from its last value",
       LongestFirstPoint},
  };
  return kSchedules;
}

const GridSchedule* FindGridSchedule(absl::string_view name) {
  if (name.empty()) name = kDefaultSchedule;
  for (const GridSchedule& s : GridSchedules()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::string DescribeGridSchedules() {
  std::vector<std::string> parts;
  for (const GridSchedule& s : GridSchedules()) {
    parts.push_back(absl::StrCat(s.name, " (", s.order, ")"));
  }
  return absl::StrJoin(parts, ", ");
}

absl::StatusOr<std::vector<std::vector<int64_t>>> GridOrder(absl::string_view schedule,
                                                            const std::vector<int64_t>& extents) {
  const GridSchedule* sched = FindGridSchedule(schedule);
  if (sched == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown grid schedule `", schedule,
                                                   "`; the known schedules are ",
                                                   DescribeGridSchedules()));
  }
  std::vector<std::vector<int64_t>> points;
  for (int64_t e : extents) {
    if (e < 0) {
      return absl::InvalidArgumentError(absl::StrCat("grid extent ", e, " is negative"));
    }
    if (e == 0) return points;
  }
  const size_t n = extents.size();
  std::vector<int64_t> coord(n, 0);  // the launch coordinate, the first axis fastest
  while (true) {
    std::vector<int64_t> point = coord;
    sched->point(extents, &point);
    points.push_back(std::move(point));
    size_t i = 0;
    for (; i < n; ++i) {
      if (++coord[i] < extents[i]) break;
      coord[i] = 0;
    }
    if (i == n) break;
  }
  return points;
}

}  // namespace cubridge::cuir
