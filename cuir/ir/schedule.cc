#include "cuir/ir/schedule.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cubridge::cuir {
namespace {

// Points in grid order: the launch coordinate is the point.
void LinearPoint(const std::vector<int64_t>&, std::vector<int64_t>*) {}

// The first axis (the query tile) slowest, from its last value to its first; the other axes
// linear within each of its values: under causal-like masks the last query tiles visit the most
// KV blocks, so every wave holds tiles of about one length, the long ones first and the short
// ones in the tail. The kernel (fa3_sm90/scheduler.cuh, LongestFirst) runs this order within
// L2-sized groups of the other axes, a choice that changes what runs together, not what is
// computed; here it is one group.
void LongestFirstPoint(const std::vector<int64_t>& extents, std::vector<int64_t>* coord) {
  if (coord->empty()) return;
  int64_t w = 0;  // the launch index, the first axis fastest
  for (size_t i = coord->size(); i-- > 0;) w = w * extents[i] + (*coord)[i];
  int64_t rest = 1;  // points per value of the first axis
  for (size_t i = 1; i < extents.size(); ++i) rest *= extents[i];
  (*coord)[0] = extents[0] - 1 - w / rest;
  int64_t r = w % rest;
  for (size_t i = 1; i < coord->size(); ++i) {
    (*coord)[i] = r % extents[i];
    r /= extents[i];
  }
}

}  // namespace

const std::vector<GridSchedule>& GridSchedules() {
  static const std::vector<GridSchedule> kSchedules = {
      {kDefaultSchedule, "the default: every axis ascending, the first axis fastest",
       LinearPoint},
      {"longest_first",
       "the first axis, the query tile, slowest and descending from its last value; the others "
       "linear within it",
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
