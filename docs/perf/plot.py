#!/usr/bin/env python3
"""Draw the book's performance plots from a benchmark run's data.

    TOOLGATE_BENCH_JSON=target/bench-decide.json cargo bench --bench decide
    python3 docs/perf/plot.py target/bench-decide.json [OUT-DIR]

writes docs/src/images/perf-latency.svg (the latency distribution of each
table row: what share of calls finished within a time) and
docs/src/images/perf-scaling.svg (p50 against stored events, the number of
policies and the argument size), or into OUT-DIR. Standard library only, so
it runs wherever the benchmark does.
"""

import datetime
import json
import math
import re
import sys
from pathlib import Path
from xml.sax.saxutils import escape

OUT = Path(__file__).resolve().parent.parent / "src" / "images"
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
          "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939",
          "#8c6d31", "#843c39", "#7b4173", "#3182bd"]


def log_ticks(low, high):
    """1, 2, 5 steps per decade between low and high (only 1 when the range
    spans more than three decades, so the labels do not run together)."""
    ticks = []
    steps = (1,) if math.log10(high / low) > 3 else (1, 2, 5)
    decade = 10 ** math.floor(math.log10(low))
    while decade <= high:
        for step in steps:
            value = step * decade
            if low <= value <= high:
                ticks.append(value)
        decade *= 10
    return ticks


def label(value):
    if value >= 1_000_000 and value % 1_000_000 == 0:
        return f"{value / 1_000_000:g}M"
    if value >= 1000 and value % 1000 == 0:
        return f"{value / 1000:g}k"
    return f"{value:g}"


class Chart:
    """One plot: log x, linear or log y, in a box at (left, top)."""

    def __init__(self, left, top, width, height, x_range, y_range, log_y, title, x_title, y_title):
        self.left, self.top, self.width, self.height = left, top, width, height
        self.x_range, self.y_range, self.log_y = x_range, y_range, log_y
        self.parts = [
            f'<rect x="{left}" y="{top}" width="{width}" height="{height}" fill="none" stroke="#999"/>',
            f'<text x="{left + width / 2}" y="{top - 10}" text-anchor="middle" font-weight="bold">{escape(title)}</text>',
            f'<text x="{left + width / 2}" y="{top + height + 36}" text-anchor="middle">{escape(x_title)}</text>',
            f'<text transform="translate({left - 48},{top + height / 2}) rotate(-90)" text-anchor="middle">{escape(y_title)}</text>',
        ]

    def x(self, value):
        low, high = (math.log10(v) for v in self.x_range)
        return self.left + (math.log10(value) - low) / (high - low) * self.width

    def y(self, value):
        low, high = self.y_range
        if self.log_y:
            low, high, value = math.log10(low), math.log10(high), math.log10(value)
        return self.top + self.height - (value - low) / (high - low) * self.height

    def axes(self, y_ticks):
        for tick in log_ticks(*self.x_range):
            x = self.x(tick)
            self.parts.append(f'<line x1="{x:.1f}" y1="{self.top}" x2="{x:.1f}" y2="{self.top + self.height}" stroke="#eee"/>')
            self.parts.append(f'<text x="{x:.1f}" y="{self.top + self.height + 16}" text-anchor="middle" class="tick">{label(tick)}</text>')
        for tick in y_ticks:
            y = self.y(tick)
            self.parts.append(f'<line x1="{self.left}" y1="{y:.1f}" x2="{self.left + self.width}" y2="{y:.1f}" stroke="#eee"/>')
            self.parts.append(f'<text x="{self.left - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{label(tick)}</text>')

    def line(self, points, color, dots=False):
        path = " ".join(f"{self.x(x):.1f},{self.y(y):.1f}" for x, y in points)
        self.parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.8"/>')
        if dots:
            for x, y in points:
                self.parts.append(f'<circle cx="{self.x(x):.1f}" cy="{self.y(y):.1f}" r="3" fill="{color}"/>')


def svg(width, height, title, parts):
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        "<style>.tick { font-size: 10px; fill: #555; }</style>",
        f'<rect width="{width}" height="{height}" fill="white"/>',
        *parts,
        "</svg>",
        "",
    ])


def caption(data):
    date = datetime.datetime.fromtimestamp(data["date_ms"] / 1000, datetime.timezone.utc)
    run = "a short run (TOOLGATE_BENCH_QUICK)" if data["quick"] else "a full run"
    return f"cargo bench --bench decide, {run}, {date:%Y-%m-%d}; {data['machine']}"


def labels(rows):
    """Each row's name; rows of the same name are told apart by their table
    (the native floor's `low-risk Read`), else by their note (a policy alone
    on a fresh or a warm instance)."""
    def table(row):
        return row.get("section", "").split(" (")[0].split(",")[0]

    def note(row):
        text = row.get("note", "")
        last = re.search(r"\(([^)]*)\)\s*$", text)
        return last.group(1) if last else text

    out = []
    for row in rows:
        same = [r for r in rows if r["case"] == row["case"]]
        if len(same) == 1:
            out.append(row["case"])
        elif [table(r) for r in same].count(table(row)) == 1:
            out.append(f'{row["case"]}: {table(row)}')
        else:
            out.append(f'{row["case"]}: {note(row)}')
    return out


def latency(data):
    rows = data["distributions"]
    names = labels(rows)
    lows = [r["percentiles_us"][0] for r in rows]
    highs = [r["percentiles_us"][99] for r in rows]
    chart = Chart(70, 40, 560, 380, (max(min(lows) * 0.8, 0.5), max(highs) * 1.2), (0, 100), False,
                  "Latency distribution of each benchmark row", "µs (log scale), up to each row's p99",
                  "% of calls finished")
    chart.axes([0, 25, 50, 75, 90, 99])
    legend = []
    for i, row in enumerate(rows):
        color = COLORS[i % len(COLORS)]
        points = [(v, p) for p, v in enumerate(row["percentiles_us"][:100]) if v > 0]
        chart.line(points, color)
        y = 52 + i * 17
        legend.append(f'<line x1="650" y1="{y - 4}" x2="670" y2="{y - 4}" stroke="{color}" stroke-width="2"/>')
        legend.append(f'<text x="676" y="{y}" font-size="11">{escape(names[i][:72])}</text>')
    height = max(480, 60 + len(rows) * 17)
    parts = chart.parts + legend + [f'<text x="70" y="{height - 12}" font-size="10" fill="#555">{escape(caption(data))}</text>']
    return svg(1100, height, "Latency distribution of each benchmark row", parts)


def scaling(data):
    groups = {}
    for name, points in data["curves"].items():
        group, series = name.split(": ", 1)
        groups.setdefault(group, []).append((series, points))
    parts = []
    titles = {"stored events": "p50 against stored events",
              "policies": "p50 against allow-only policies",
              "argument size": "p50 against argument size (bytes)"}
    for g, (group, series) in enumerate(sorted(groups.items())):
        xs = [x for _, pts in series for x, _ in pts]
        ys = [y for _, pts in series for _, y in pts]
        left = 70 + g * 360
        chart = Chart(left, 40, 280, 260, (min(xs) * 0.8, max(xs) * 1.25), (min(ys) * 0.7, max(ys) * 1.4), True,
                      titles.get(group, group), group, "p50 µs (log scale)")
        chart.axes(log_ticks(min(ys) * 0.7, max(ys) * 1.4))
        for i, (name, points) in enumerate(series):
            color = COLORS[i]
            chart.line(sorted(points), color, dots=True)
            y = 350 + i * 16
            parts.append(f'<line x1="{left}" y1="{y - 4}" x2="{left + 20}" y2="{y - 4}" stroke="{color}" stroke-width="2"/>')
            parts.append(f'<text x="{left + 26}" y="{y}" font-size="11">{escape(name)}</text>')
        parts.extend(chart.parts)
    parts.append(f'<text x="70" y="420" font-size="10" fill="#555">{escape(caption(data))}</text>')
    return svg(1130, 430, "How a decision's p50 scales", parts)


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    data = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2]) if len(sys.argv) == 3 else OUT
    out.mkdir(parents=True, exist_ok=True)
    (out / "perf-latency.svg").write_text(latency(data))
    (out / "perf-scaling.svg").write_text(scaling(data))
    print(f"wrote {out / 'perf-latency.svg'} and {out / 'perf-scaling.svg'}")


if __name__ == "__main__":
    main()
