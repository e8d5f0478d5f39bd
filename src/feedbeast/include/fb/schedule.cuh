// The tile order of a persistent GEMM (chapter 07): which output tile a block computes next.
//
// A unit of work is one output tile (or, with clusters, one column of cluster-many tiles sharing an
// n-tile). A persistent block takes units first, first + step, first + 2 step, ... in one of these orders.
#pragma once

namespace fb {
namespace schedule {

struct Unit { int m, n; };

// Row-major over units would sweep all n-tiles of one m-row before the next: every B tile is read once
// per m-row, long after it left L2. Grouped order walks `group` m-units down one n column, then the next
// column: the blocks running at the same time share a few B tiles and a few A tiles (L2 reuse).
__device__ inline Unit grouped_unit(int unit, int m_units, int n_units, int group) {
  group = group > 0 ? group : 1;
  const int per_group = group * n_units;            // units in one band of `group` m-units
  const int first = (unit / per_group) * group;     // the band's first m-unit
  const int rows = min(group, m_units - first);     // the last band may be shorter
  const int in = unit % per_group;
  return {first + in % rows, in / rows};
}

// Any precomputed order (e.g. a Hilbert curve built on the host): entry u holds (m-unit, n-unit).
__device__ inline Unit table_unit(int unit, const int* order) { return {order[2 * unit], order[2 * unit + 1]}; }

}  // namespace schedule
}  // namespace fb
