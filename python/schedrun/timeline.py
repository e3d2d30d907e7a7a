"""A picture of a run: `python3 -m schedrun.timeline trace.json -o run.png`.

Reads the Chrome trace `sched-run --trace` (or Scheduler.run(trace=...))
writes and draws, on one time axis: a lane per actor and device (compile,
record, execute, and each device's timed nodes), each job's phases as bars
coloured by phase (timed nodes by the program step they ran), and below, the
jobs in flight and the jobs waiting to execute over time.
"""

import argparse
import json
import sys

PHASE_COLOURS = {"compile": "#7b6fd6", "record": "#e3a13b", "execute": "#3f9e5b", "submit": "#888888",
                 "done": "#444444"}
STEP_COLOURS = ["#2f6db3", "#c4473b", "#3f9e5b", "#b37a2f", "#8a4fb3", "#2fa3b3", "#b32f82", "#6f8a2f"]


def load(path):
    """The lanes (tid -> name, in sort order), spans and counters of a trace."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    names, order = {}, {}
    spans, counters = [], {}
    for e in events:
        ph = e.get("ph")
        if ph == "M" and e.get("name") == "thread_name":
            names[e["tid"]] = e["args"]["name"]
        elif ph == "M" and e.get("name") == "thread_sort_index":
            order[e["tid"]] = e["args"]["sort_index"]
        elif ph == "X":
            spans.append(e)
        elif ph == "C":
            counters.setdefault(e["name"], []).append((e["ts"], e["args"].get("value", 0)))
    lanes = sorted({s["tid"] for s in spans}, key=lambda t: (order.get(t, t), t))
    return [(t, names.get(t, "lane %d" % t)) for t in lanes], spans, counters


def draw(trace, out, title=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    lanes, spans, counters = load(trace)
    if not spans:
        raise SystemExit("%s: no spans to draw" % trace)
    row = {tid: i for i, (tid, _) in enumerate(lanes)}
    t0 = min(s["ts"] for s in spans)
    ms = lambda ts: (ts - t0) / 1000.0  # noqa: E731
    fig, (ax, axc) = plt.subplots(2, 1, sharex=True, figsize=(12, 2 + 0.32 * len(lanes) + 2),
                                  gridspec_kw={"height_ratios": [max(2, len(lanes)), 3]})
    steps = {}
    for s in spans:
        y = row[s["tid"]]
        if s.get("cat") == "launch":
            step = s["name"].split(" (")[0]  # "kernel 'scale'", less its place in the config
            colour = STEP_COLOURS[steps.setdefault(step, len(steps)) % len(STEP_COLOURS)]
        else:
            colour = PHASE_COLOURS.get(s["name"], "#999999")
        width = max(s.get("dur", 0) / 1000.0, 0.0)
        ax.broken_barh([(ms(s["ts"]), width)], (y - 0.4, 0.8), facecolors=colour, edgecolor="none")
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([name for _, name in lanes], fontsize=8)
    ax.invert_yaxis()
    ax.set_title(title or trace)
    legend = [Patch(color=c, label=p) for p, c in PHASE_COLOURS.items() if p not in ("submit", "done")]
    legend += [Patch(color=STEP_COLOURS[i % len(STEP_COLOURS)], label=n[:40]) for n, i in list(steps.items())[:6]]
    ax.legend(handles=legend, fontsize=7, loc="upper right", ncol=3)
    for name, points in sorted(counters.items()):
        points.sort()
        axc.step([ms(t) for t, _ in points], [v for _, v in points], where="post", label=name)
    axc.set_xlabel("ms from the first event")
    axc.set_ylabel("jobs")
    axc.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return len(lanes), len(spans)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m schedrun.timeline", description=__doc__.split("\n")[0])
    ap.add_argument("trace", help="a trace file from sched-run --trace")
    ap.add_argument("-o", "--output", default="timeline.png", help="the picture to write (PNG, SVG, PDF)")
    ap.add_argument("--title", help="the picture's title (default: the trace's path)")
    a = ap.parse_args(argv)
    try:
        lanes, spans = draw(a.trace, a.output, a.title)
    except (OSError, ValueError, KeyError) as e:
        print("schedrun.timeline: %s: %s" % (a.trace, e), file=sys.stderr)
        return 2
    print("%s: %d lanes, %d spans" % (a.output, lanes, spans))
    return 0


if __name__ == "__main__":
    sys.exit(main())
