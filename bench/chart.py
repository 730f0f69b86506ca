"""Draws the benchmark matrix as an SVG bar chart for the README: per variant, CuBridge, Flex and
SDPA's best backend (cuDNN where it ran) in TFLOP/s on kept elements, one panel per sequence
length, for one head configuration. Reads the JSON that bench/run_matrix.py writes
($OUT/matrix_rows.json; kept runs live in bench/results/). Plain SVG text: no plotting library
among the project's dependencies, and the README shows it as it is.

    python3 bench/chart.py bench/results/RUN.json [--heads qwen2.5-72b] [--out docs/img/matrix.svg]
"""
import argparse
import html
import json
import sys

SERIES = (("cubridge_tflops", "CuBridge", "#2b6cb0"), ("flex_tflops", "FlexAttention", "#dd6b20"),
          ("sdpa_tflops", "SDPA (best backend)", "#718096"))
BAR, GAP, LABEL_W, PANEL_W, TOP = 7, 8, 160, 380, 78


def panel(rows, x0, y0, scale, title):
    """One sequence length's bars; returns the SVG elements."""
    out = [f'<text x="{x0 + LABEL_W}" y="{y0 - 10}" class="h">{html.escape(title)}</text>']
    y = y0
    for r in rows:
        out.append(f'<text x="{x0 + LABEL_W - 6}" y="{y + 1.5 * BAR + 4}" class="l">'
                   f'{html.escape(r["variant"])}</text>')
        for i, (key, _, color) in enumerate(SERIES):
            v = r.get(key)
            if v is None:
                continue
            w = v * scale
            out.append(f'<rect x="{x0 + LABEL_W}" y="{y + i * BAR}" width="{w:.1f}" height="{BAR - 1}" '
                       f'fill="{color}"/>')
            out.append(f'<text x="{x0 + LABEL_W + w + 3:.1f}" y="{y + i * BAR + BAR - 1}" class="v">'
                       f'{v:.0f}</text>')
        y += 3 * BAR + GAP
    return out, y


def draw(data, heads):
    rows = [r for r in data["rows"] if r.get("group") == heads and r.get("status") == "ok"]
    if not rows:
        groups = sorted({r.get("group") for r in data["rows"]})
        sys.exit(f"chart: no rows for --heads {heads} (the file has {', '.join(map(str, groups))})")
    seqlens = sorted({r["S"] for r in rows})
    peak = max(r.get(k) or 0 for r in rows for k, _, _ in SERIES)
    scale = (PANEL_W - 40) / peak
    meta = data.get("meta", {})
    first = rows[0]
    width = len(seqlens) * (LABEL_W + PANEL_W)
    body, bottom = [], TOP
    for i, s in enumerate(seqlens):
        part = [r for r in rows if r["S"] == s]
        title = f"S = {s // 1024}k" if s % 1024 == 0 else f"S = {s}"
        elems, end = panel(part, i * (LABEL_W + PANEL_W), TOP, scale, title)
        body += elems
        bottom = max(bottom, end)
    heading = (f"TFLOP/s on kept elements, bf16, d={first['head_dim']}, Hq={first['heads_q']} "
               f"Hkv={first['heads_kv']}, {meta.get('gpu', '?')}, {meta.get('date', '?')} "
               f"(forward; docs/benchmarks.md)")
    legend, x = [], 10
    for _, name, color in SERIES:
        legend.append(f'<rect x="{x}" y="34" width="12" height="10" fill="{color}"/>'
                      f'<text x="{x + 16}" y="43" class="l0">{name}</text>')
        x += 40 + 8 * len(name)
    height = bottom + 10
    return "\n".join(
        [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
         f'viewBox="0 0 {width} {height}" font-family="sans-serif">',
         '<style>.h{font-size:13px;font-weight:bold}.l{font-size:11px;text-anchor:end}'
         '.l0{font-size:11px}.v{font-size:8px;fill:#333}.t{font-size:12px}</style>',
         '<rect width="100%" height="100%" fill="white"/>',
         f'<text x="10" y="18" class="t">{html.escape(heading)}</text>']
        + legend + body + ["</svg>", ""])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", help="a matrix_rows.json of bench/run_matrix.py")
    ap.add_argument("--heads", default="qwen2.5-72b", help="the head configuration (its group key)")
    ap.add_argument("--out", default="-", help="the SVG file (default: stdout)")
    args = ap.parse_args()
    with open(args.rows) as f:
        svg = draw(json.load(f), args.heads)
    if args.out == "-":
        sys.stdout.write(svg)
    else:
        with open(args.out, "w") as f:
            f.write(svg)


if __name__ == "__main__":
    main()
