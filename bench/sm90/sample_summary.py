"""Sums ncu's per-SASS-instruction warp-state samples (`ncu -i R --page source --csv
--print-source sass`) by how often each instruction ran: with one launch profiled, code run once
per KV tile, once per work tile and once per CTA fall into separate execution counts, so the
table says what share of the samples each level of the loop nest takes. Then the instructions
with the most samples and their two main stall reasons.
    python3 bench/sm90/sample_summary.py SOURCE.csv [TOP]"""
import collections, csv, sys


def load(path):
    rows = list(csv.reader(open(path)))
    header = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    ix = {h: i for i, h in enumerate(rows[header])}
    stalls = [h for h in ix if h.startswith("stall_") and "Not Issued" not in h]
    out = []
    for r in rows[header + 1:]:
        if len(r) < len(ix):
            continue
        num = lambda h: int(r[ix[h]] or 0)  # noqa: E731
        out.append({"src": r[ix["Source"]].strip(), "samples": num("Warp Stall Sampling (All Samples)"),
                    "executed": num("Instructions Executed"), "stalls": {h: num(h) for h in stalls}})
    return out


rows = load(sys.argv[1])
top = int(sys.argv[2]) if len(sys.argv) > 2 else 20
total = sum(r["samples"] for r in rows) or 1
print(f"{len(rows)} instructions, {total} samples")
by_count = collections.Counter()
n_instr = collections.Counter()
for r in rows:
    by_count[r["executed"]] += r["samples"]
    n_instr[r["executed"]] += 1
print("\nsamples by execution count (one count per loop level):")
for count, samples in by_count.most_common(10):
    print(f"  executed {count:10d}  {samples / total:6.1%}  ({n_instr[count]} instructions)")
print(f"\ntop {top} instructions:")
for i, r in sorted(enumerate(rows), key=lambda x: -x[1]["samples"])[:top]:
    why = ", ".join(f"{k[6:]} {v}" for k, v in sorted(r["stalls"].items(), key=lambda x: -x[1])[:2])
    print(f"  #{i:5d} {r['samples'] / total:6.2%}  executed {r['executed']:9d}  {r['src'][:64]:64s} {why}")
