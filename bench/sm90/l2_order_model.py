"""Trace model of the sm_90 expert's persistent tile order: L2 hit rate and balance, on the CPU.

    python3 bench/sm90/l2_order_model.py [--seqlens 1024,8192] [--heads 32/32,64/8,128/8]
        [--head-dims 128] [--orders plain,kernel] [--group-mb 24] [--l2-mb 25] [--ctas 132]
        [--full]

Each of --ctas persistent CTAs takes every ctas-th work tile of an order (scheduler.cuh) and walks
its KV tiles from the diagonal down (causal; all of them with --full), one time unit per KV tile
and 1.5 per work tile (Q load, epilogue). Every K/V tile and every work tile's Q goes through an
LRU cache of --l2-mb. Printed per shape: the hit rate (bytes), the K/V gigabytes that missed, the
last CTA's finish over the mean (balance), and a predicted speedup over the first order, from
balance x (1 + 0.3 x miss rate); the 0.3 is Llama2's 11% per clock against Qwen's at 59% / 95%
hits (docs/benchmarks.md).

Orders: `plain` = every L2 group longest first (the kernel before 2026-11-25); `kernel` = the
kernel's order (under MHA every other group, counted back from the last, first to last); `all`
= that alternation for GQA too; `snake` = plain, with every other pass of the CTAs dealt in
reverse. Checked against ncu (causal 8k, head dim 128), modelled / measured hit rates: Llama2
heads 32/32 plain 65% / 58.9%, kernel 93% / 87.8%, plain with 16 MB groups 51% / 54.8%; Qwen 64/8
98% / 94.7%. Hit rates track; balance to a few percent only (A/Bs of group sizes disagreed
with it by 3-6%), so time an order before keeping it.
"""
import argparse
import heapq
import math
from collections import OrderedDict


def work_order(m_blocks, hq, hkv, batch, kv_head_bytes, group_bytes, order):
    """The work tiles (m_block, pair) in the scheduler's numbering; pair = batch * hq + head."""
    per_kv = max(1, hq // max(1, hkv))
    pairs = hq * batch
    group = min(pairs, max(1, group_bytes // kv_head_bytes) * per_kv)
    groups = (pairs + group - 1) // group
    alternate = order == "all" or (order == "kernel" and per_kv == 1)
    tiles = []
    for g, first in enumerate(range(0, pairs, group)):
        size = min(group, pairs - first)
        descending = not alternate or (groups - 1 - g) % 2 == 0
        for row in range(m_blocks):
            m = m_blocks - 1 - row if descending else row
            tiles += [(m, first + s) for s in range(size)]
    return tiles


def deal(tiles, ctas, snake):
    per = [[] for _ in range(ctas)]
    for i, t in enumerate(tiles):
        rnd, lane = divmod(i, ctas)
        per[ctas - 1 - lane if snake and rnd % 2 else lane].append(t)
    return per


def simulate(per_cta, per_kv, m_blocks, full, kv_tile_bytes, l2_bytes, tile_cost=1.5):
    cache, used, hits, misses, kv_missed = OrderedDict(), 0, 0, 0, 0
    finish = [0.0] * len(per_cta)
    heap = [(0.0, c, 0, -1) for c, tiles in enumerate(per_cta) if tiles]
    heapq.heapify(heap)

    def read(key, nbytes):  # byte-weighted, as ncu's sector hit rate
        nonlocal used, hits, misses
        if key in cache:
            cache.move_to_end(key)
            hits += nbytes
            return True
        misses += nbytes
        cache[key] = nbytes
        used += nbytes
        while used > l2_bytes:
            used -= cache.popitem(last=False)[1]
        return False

    while heap:
        now, c, i, n = heapq.heappop(heap)
        m, pair = per_cta[c][i]
        if n < 0:  # a work tile's Q (half a K/V tile), its fixed cost, then the walk
            read(("q", pair, m), kv_tile_bytes // 2)
            heapq.heappush(heap, (now + tile_cost, c, i, m_blocks - 1 if full else m))
            continue
        # batch-major pairs: one kv head per per_kv query heads
        if not read(("kv", pair // per_kv, n), kv_tile_bytes):
            kv_missed += kv_tile_bytes
        if n > 0:
            heapq.heappush(heap, (now + 1, c, i, n - 1))
        else:
            finish[c] = now + 1
            if i + 1 < len(per_cta[c]):
                heapq.heappush(heap, (now + 1, c, i + 1, -1))
    return hits / (hits + misses), kv_missed / 1e9, max(finish) / (sum(finish) / len(finish))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqlens", default="1024,8192")
    ap.add_argument("--heads", default="32/32,64/8,128/8")
    ap.add_argument("--head-dims", default="128")
    ap.add_argument("--orders", default="plain,kernel")
    ap.add_argument("--group-mb", type=float, default=24)
    ap.add_argument("--l2-mb", type=float, default=25)
    ap.add_argument("--ctas", type=int, default=132)
    ap.add_argument("--full", action="store_true", help="full attention instead of causal")
    args = ap.parse_args()
    orders = args.orders.split(",")
    for o in orders:
        if o not in ("plain", "kernel", "all", "snake"):
            ap.error(f"--orders: unknown '{o}' (known: plain, kernel, all, snake)")
    print(f"| S | D | heads | {' | '.join(f'{o}: hits, K/V GB missed, balance, x' for o in orders)} |")
    print("|---|---|---|" + "---|" * len(orders))
    logs = {o: 0.0 for o in orders}
    count = 0
    for s in map(int, args.seqlens.split(",")):
        for d in map(int, args.head_dims.split(",")):
            for heads in args.heads.split(","):
                hq, hkv = map(int, heads.split("/"))
                m_blocks, batch = (s + 127) // 128, max(1, 16384 // s)
                cells, first = [], None
                for o in orders:
                    tiles = work_order(m_blocks, hq, hkv, batch, 2 * s * d * 2,
                                       int(args.group_mb * 2**20), o)
                    hit, dram, balance = simulate(deal(tiles, args.ctas, o == "snake"),
                                                  max(1, hq // hkv), m_blocks, args.full,
                                                  2 * 128 * d * 2, int(args.l2_mb * 2**20))
                    cost = balance * (1 + 0.3 * (1 - hit))
                    first = first or cost
                    logs[o] += math.log(first / cost)
                    cells.append(f"{hit:.2f}, {dram:.2f}, {balance:.3f}, {first / cost:.3f}")
                count += 1
                print(f"| {s} | {d} | {hq}/{hkv} | {' | '.join(cells)} |")
    print("geomean predicted speedup over the first order: " +
          ", ".join(f"{o} {math.exp(v / count):.3f}" for o, v in logs.items()))


if __name__ == "__main__":
    main()
