#!/usr/bin/env python3
"""Draws the fleet dashboard's panels from a real Prometheus into a PNG, laid out as Grafana
lays them out (gridPos), for docs/operations.md. No Grafana: each panel's queries are asked of
Prometheus's HTTP API (`query_range` for graphs, `query` for stats and tables) with the
variables set to "all", and plotted with matplotlib.

tests/monitoring.rs runs it against the Prometheus it starts when STACKSYNC_DASHBOARD_PNG is set:

    STACKSYNC_DASHBOARD_PNG=$PWD/docs/dashboard.png STACKSYNC_DASHBOARD_SECONDS=120 \
        cargo test --test monitoring every_dashboard_query -- --nocapture

Needs matplotlib (`pip install matplotlib`).
"""

import argparse
import json
import re
import time
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend is chosen first)
import matplotlib.ticker  # noqa: E402

BG, PANEL, TEXT, GRID = "#111217", "#181b1f", "#ccccdc", "#2c3235"
COLORS = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#fade2a", "#96d98d", "#ffb357"]
ROW_H = 0.45  # a row header's height, in grid units


def substitute(expr, step):
    return (expr.replace("$__rate_interval", "1m").replace("$__interval", f"{step}s").replace("$__range", "5m")
            .replace("$namespace", ".*").replace("$subscription", ".*"))


def api(base, path, **params):
    url = f"{base}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=30) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{path} {params}: {body}")
    return body["data"]["result"]


def legend(fmt, metric):
    if not fmt:
        return ", ".join(f"{k}={v}" for k, v in sorted(metric.items()) if k != "__name__") or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt)


def fmt_value(v, unit):
    if v != v:  # NaN
        return "–"
    if unit == "s":
        return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.1f} s"
    return f"{v:.0f}" if abs(v - round(v)) < 1e-9 else f"{v:.2f}"


def draw_timeseries(ax, base, panel, start, end, step):
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
    # Series an override puts on the right axis (by name), with their own unit.
    right = {}
    for o in panel.get("fieldConfig", {}).get("overrides", []):
        props = {p["id"]: p["value"] for p in o.get("properties", [])}
        if o.get("matcher", {}).get("id") == "byName" and props.get("custom.axisPlacement") == "right":
            right[o["matcher"]["options"]] = props.get("unit")
    twin = None
    n = 0
    for t in panel.get("targets", []):
        for s in api(base, "query_range", query=substitute(t["expr"], step), start=start, end=end, step=step):
            xs = [float(x) - end for x, _ in s["values"]]
            ys = [float(y) for _, y in s["values"]]
            name = legend(t.get("legendFormat"), s["metric"])
            on = ax
            if name in right:
                twin = twin or ax.twinx()
                on = twin
                twin.tick_params(colors=TEXT, labelsize=7)
                twin.set_ylim(bottom=0)
                for sp in twin.spines.values():
                    sp.set_visible(False)
                if right[name] == "s":
                    twin.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda y, _: fmt_value(y, "s")))
            on.plot(xs, ys, color=COLORS[n % len(COLORS)], linewidth=1.4, label=name)
            n += 1
    if twin:
        lines = ax.get_lines() + twin.get_lines()
        ax.legend(lines, [line.get_label() for line in lines], loc="upper left", fontsize=6.5, frameon=False, labelcolor=TEXT)
    span = end - start
    ax.set_xlim(-span, 0)
    ax.grid(color=GRID, linewidth=0.6)
    ax.tick_params(colors=TEXT, labelsize=7)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
        lambda x, _: "now" if not x else f"{x / 60:.0f}m" if span > 600 else f"{x:.0f}s"))
    # Counts from 0, in whole steps; a flat line sits inside the panel, not on its edge.
    ax.set_ylim(bottom=0)
    high = ax.get_ylim()[1]
    if high <= 0 or not n:
        ax.set_ylim(0, 1)
    elif all(y != y or abs(y - round(y)) < 1e-9 for line in ax.get_lines() for y in line.get_ydata()):
        ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_ylim(0, max(high, 1) * 1.15)
    if unit == "s":
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda y, _: fmt_value(y, "s")))
    if n and not twin:
        ax.legend(loc="upper left", fontsize=6.5, frameon=False, labelcolor=TEXT, ncol=2 if n > 4 else 1)
    elif not n:
        ax.text(0.5, 0.5, "No data", color=TEXT, ha="center", va="center", transform=ax.transAxes, fontsize=10)


def draw_stat(ax, base, panel):
    values = []
    for t in panel.get("targets", []):
        for s in api(base, "query", query=substitute(t["expr"], 15)):
            values.append((legend(t.get("legendFormat"), s["metric"]), float(s["value"][1])))
    steps = panel.get("fieldConfig", {}).get("defaults", {}).get("thresholds", {}).get("steps", [])
    fixed = panel.get("fieldConfig", {}).get("defaults", {}).get("color", {}).get("fixedColor")
    named = {"red": "#f2495c", "orange": "#ff9830", "green": "#73bf69"}
    ax.axis("off")
    for i, (name, v) in enumerate(values or [("", float("nan"))]):
        color = named.get(fixed, fixed) or "#73bf69"
        for s in steps:
            if s.get("value") is not None and v >= s["value"]:
                color = named.get(s["color"], s["color"])
        x = (i + 0.5) / max(len(values), 1)
        ax.text(x, 0.45, fmt_value(v, None), color=color, ha="center", va="center", fontsize=26 if len(values) < 3 else 18,
                fontweight="bold", transform=ax.transAxes)
        if len(values) > 1:
            ax.text(x, 0.05, name, color=TEXT, ha="center", fontsize=7, transform=ax.transAxes)


def draw_table(ax, base, panel):
    rows = []
    for t in panel.get("targets", []):
        for s in api(base, "query", query=substitute(t["expr"], 15)):
            metric = {k: v for k, v in s["metric"].items() if k != "__name__"}
            for k in ("release",):
                metric.setdefault(k, "(none yet)")
            rows.append({**metric, "Clusters": fmt_value(float(s["value"][1]), None)})
    ax.axis("off")
    if not rows:
        ax.text(0.5, 0.5, "No data", color=TEXT, ha="center", va="center", transform=ax.transAxes)
        return
    cols = [c for c in rows[0] if c != "__name__"]
    rows.sort(key=lambda r: [r.get(c, "") for c in cols])
    table = ax.table(cellText=[[r.get(c, "") for c in cols] for r in rows], colLabels=cols, loc="upper center",
                     cellLoc="left", colLoc="left")
    table.auto_set_font_size(False)
    table.set_fontsize(7)
    for cell in table.get_celld().values():
        cell.set_facecolor(PANEL)
        cell.set_edgecolor(GRID)
        cell.get_text().set_color(TEXT)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prometheus", required=True, help="base URL, e.g. http://127.0.0.1:9090")
    p.add_argument("--dashboard", required=True, help="the dashboard JSON")
    p.add_argument("--out", required=True, help="the PNG to write")
    p.add_argument("--range", type=int, default=0, help="seconds shown (default: since Prometheus's first sample)")
    args = p.parse_args()

    dash = json.load(open(args.dashboard))
    end = time.time()
    start = end - args.range if args.range else float(api(args.prometheus, "query", query="min_over_time(timestamp(up)[1h:1s])")[0]["value"][1])
    step = max(1, int((end - start) / 200))
    panels = dash["panels"]
    height = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    # Rows take little room: map grid y to figure units, row headers squeezed.
    ys, y = {}, 0.0
    for gy in range(height + 1):
        ys[gy] = y
        y += ROW_H if any(p["type"] == "row" and p["gridPos"]["y"] == gy for p in panels) else 1.0
    total = y
    unit = 0.42  # inches per grid unit of height
    fig = plt.figure(figsize=(20, total * unit + 0.6), facecolor=BG)
    fig.text(0.01, 1 - 0.25 / (total * unit + 0.6), dash["title"], color=TEXT, fontsize=14, fontweight="bold", va="center")
    top = 1 - 0.6 / (total * unit + 0.6)

    def box(gp):
        x0, w = gp["x"] / 24, gp["w"] / 24
        y0 = ys[gp["y"]]
        y1 = ys.get(gp["y"] + gp["h"], total)
        return x0, top - y1 / total * top, w, (y1 - y0) / total * top

    for panel in panels:
        x, y, w, h = box(panel["gridPos"])
        if panel["type"] == "row":
            fig.text(x + 0.005, y + h / 2, panel["title"], color=TEXT, fontsize=11, fontweight="bold", va="center")
            continue
        pad_x, pad_y = 0.004, 0.004
        frame = fig.add_axes([x + pad_x, y + pad_y, w - 2 * pad_x, h - 2 * pad_y])
        frame.set_facecolor(PANEL)
        frame.set_xticks([])
        frame.set_yticks([])
        for s in frame.spines.values():
            s.set_color(GRID)
        frame.text(0.01, 0.97, panel["title"], color=TEXT, fontsize=9, fontweight="bold", va="top", transform=frame.transAxes)
        title_h = 0.3 / fig.get_figheight()
        left, bottom = 0.5 / fig.get_figwidth(), 0.3 / fig.get_figheight()
        overrides = json.dumps(panel.get("fieldConfig", {}).get("overrides", []))
        right = 0.5 / fig.get_figwidth() if '"right"' in overrides else 0.006
        inner = [x + pad_x + left, y + pad_y + bottom, w - 2 * pad_x - left - right, h - 2 * pad_y - bottom - title_h - 0.012]
        ax = fig.add_axes(inner)
        ax.set_facecolor(PANEL)
        for s in ax.spines.values():
            s.set_visible(False)
        kind = panel["type"]
        if kind == "stat":
            draw_stat(ax, args.prometheus, panel)
        elif kind == "table":
            draw_table(ax, args.prometheus, panel)
        else:
            draw_timeseries(ax, args.prometheus, panel, start, end, step)
    fig.savefig(args.out, dpi=80, facecolor=BG)
    print(f"wrote {args.out}: {len([p for p in panels if p['type'] != 'row'])} panels, {end - start:.0f} s of data")


if __name__ == "__main__":
    main()
