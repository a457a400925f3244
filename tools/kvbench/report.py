#!/usr/bin/python3
"""report.py — kvbench's simulation report as a chart (matplotlib, Agg).

    /usr/bin/python3 tools/kvbench/report.py JSON [SVG] [--png PNG] [--dump]

Reads the JSON report kvbench writes beside its chart (kvbench-report.json)
and draws, one panel each, with axes, units and a legend:

  a. the hit ratio per second, of all tiers and of each tier: "used"
     (`hit_ratio`, the chunks a turn loaded) and, when the JSON has it,
     "found" (`found_ratio` or `found_chunks`: found by the lookup, some
     perhaps recomputed rather than loaded, as the load plan decides);
  b. the mean TTFT per second with kvact, without it and its bound;
  c. the TTFT distribution (ECDF of every turn) of the three, p50 and p99
     marked;
  d. per tier, its traffic per second (GB/s read and written) against its
     measured rate (`bound_bandwidths`; L1's is the copy into the paged
     cache).

A per-second point sits at the middle of its second (x = second + 0.5);
a rate divides by the second's length (the last one is partial). Missing
keys draw nothing (a null is a gap): the JSON may gain fields (the load
plan's `found_chunks`, per second and per tier) or lack them.

--dump prints every line drawn, one JSON object a line: the panel (the
axes' label), the line's label and its x and y, read back from the
figure's artists (tests/tools/kvbench_report_test.sh). Exits 3, silently
for kvbench, when matplotlib does not import: it is Debian's
python3-matplotlib, for /usr/bin/python3.
"""
import json
import math
import sys

NO_MATPLOTLIB = 3  # kvbench then draws its own one-panel chart

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import PercentFormatter
except ImportError as e:
    print("report.py: %s: apt-get install python3-matplotlib (for %s)" % (e, sys.executable),
          file=sys.stderr)
    sys.exit(NO_MATPLOTLIB)

COLORS = {"with kvact": "tab:blue", "without kvact": "tab:gray", "bound": "tab:green"}


def num(v):
    """A JSON number, NaN for null or absent."""
    return float("nan") if v is None else float(v)


def seconds(r):
    return r.get("per_second") or []


def second_len(r, s):
    """The length of second s["second"] of the run: 1 but for the last."""
    return max(min(1.0, r.get("elapsed_s", 0) - s["second"]), 1e-9)


def tier_names(r):
    names = [t["name"] for t in r.get("tiers") or []]
    for s in seconds(r):
        names += [t["name"] for t in s.get("tiers") or [] if t["name"] not in names]
    return names


def tier_of(s, name):
    return next((t for t in s.get("tiers") or [] if t.get("name") == name), {})


def xs(r):
    return [s["second"] + 0.5 for s in seconds(r)]


def time_axis(ax, r):
    sec = seconds(r)
    last = second_len(r, sec[-1]) if sec else 1
    ax.set_xlabel("seconds since the engines started" +
                  (" (the last point: %.2f s)" % last if last < 0.995 else ""))
    ax.set_xlim(0, max(1, len(seconds(r))))
    ax.grid(alpha=0.3)


def found_ratio(d, chunks):
    """The ratio of chunks found (the load plan's found_chunks) in entry d
    of a second of `chunks` chunks, None when the JSON has none."""
    if "found_ratio" in d:
        return num(d["found_ratio"])
    if "found_chunks" in d:
        return d["found_chunks"] / chunks if chunks else 0.0
    return None


def panel_hits(ax, r):
    """a. The hit ratio per second, of all tiers and of each one: used
    (hit_ratio: the chunks loaded) and, when the JSON has it, found."""
    ax.set_label("hit_ratio")
    sec = seconds(r)
    used = [("all tiers", lambda s: s)] + [(n, lambda s, n=n: tier_of(s, n)) for n in tier_names(r)]
    for i, (name, entry) in enumerate(used):
        style = dict(color="black", lw=4, alpha=0.35) if i == 0 else dict(color="C%d" % i)
        if any("hit_ratio" in entry(s) for s in sec):
            ax.plot(xs(r), [num(entry(s).get("hit_ratio")) for s in sec], ls="-",
                    label="%s (used)" % name, **style)
        found = [found_ratio(entry(s), s.get("chunks", 0)) for s in sec]
        if any(f is not None for f in found):
            ax.plot(xs(r), [num(f) for f in found], ls="--", label="%s (found)" % name, **style)
    ax.set_title("a. Hit ratio per second, by tier")
    ax.set_ylabel("chunks of the turns (%)")
    ax.yaxis.set_major_formatter(PercentFormatter(xmax=1))
    ax.set_ylim(0, 1.02)
    time_axis(ax, r)
    ax.legend(fontsize="small", loc="best")


def panel_ttft(ax, r):
    """b. The mean TTFT per second, with kvact, without it, its bound."""
    ax.set_label("ttft")
    sec = seconds(r)
    for label, key in (("with kvact", "ttft_mean_ms"), ("without kvact", "ttft_mean_ms_without_kvact"),
                       ("bound", "ttft_mean_ms_bound")):
        if any(key in s for s in sec):
            ax.plot(xs(r), [num(s.get(key)) for s in sec], marker="o", ms=3,
                    ls=":" if label == "bound" else "-", color=COLORS[label], label=label)
    ax.set_title("b. Mean simulated TTFT per second")
    ax.set_ylabel("TTFT (ms)")
    ax.set_ylim(bottom=0)
    time_axis(ax, r)
    ax.legend(fontsize="small", loc="best")


def pct(v, p):
    """kvbench's percentile (sim_pct): the sorted sample nearest p."""
    i = int(p / 100 * (len(v) - 1) + 0.5)
    return v[min(i, len(v) - 1)]


def panel_ecdf(ax, r):
    """c. Every turn's TTFT as an ECDF, p50 and p99 marked."""
    ax.set_label("ttft_ecdf")
    samples = r.get("ttft_samples_ms") or {}
    for label, key in (("with kvact", "with_kvact"), ("without kvact", "without_kvact"),
                       ("bound", "bound")):
        v = sorted(samples.get(key) or [])
        if not v:
            continue
        c = COLORS[label]
        p50, p99 = pct(v, 50), pct(v, 99)
        ax.step(v, [(i + 1) / len(v) for i in range(len(v))], where="post", color=c,
                label="%s: p50 %.1f ms, p99 %.1f ms" % (label, p50, p99))
        ax.axvline(p50, color=c, ls="--", lw=1, label="_p50 " + label)
        ax.axvline(p99, color=c, ls=":", lw=1, label="_p99 " + label)
    ax.set_title("c. TTFT distribution, %d turns (dashed p50, dotted p99)" % r.get("requests", 0))
    ax.set_xlabel("TTFT (ms)")
    ax.set_ylabel("turns with a TTFT at most x")
    ax.yaxis.set_major_formatter(PercentFormatter(xmax=1))
    ax.set_ylim(0, 1.02)
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="lower right")


def rate_of(r, name):
    """The tier's measured rate in GB/s and how, or (0, how) when none."""
    probe = "copy" if name == "L1" else name
    for b in r.get("bound_bandwidths") or []:
        if b.get("tier") == probe:
            return num(b.get("gb_per_s")), b.get("how", "")
    return 0.0, "not measured"


def panel_traffic(ax, r, name):
    """d. A tier's bytes read and written per second against its rate."""
    ax.set_label("traffic:" + name)
    sec = seconds(r)
    what = ("read into the paged caches (every hit)", "written by the engines' stores") \
        if name == "L1" else ("read (loaded into L1)", "written (stored from L1)")
    peak, both = 0.0, None
    for (key, color), text in zip((("bytes_read", "tab:blue"), ("bytes_written", "tab:orange")), what):
        if any(key in tier_of(s, name) for s in sec):
            ys = [num(tier_of(s, name).get(key)) / second_len(r, s) / 1e9 for s in sec]
            ax.plot(xs(r), ys, marker="o", ms=3, color=color, label=text)
            both = ys if both is None else [a + b for a, b in zip(both, ys)]
            peak = max([peak] + [y for y in both if not math.isnan(y)])
    if name != "L1" and both is not None:  # a disk shares its rate between the two
        ax.plot(xs(r), both, color="tab:purple", lw=1, alpha=0.6, label="read + written")
    gbs, how = rate_of(r, name)
    if gbs > 0 and not math.isnan(gbs):
        label = "measured %s rate %.2f GB/s (%s)" % ("copy" if name == "L1" else "read", gbs, how)
        if gbs > 4 * peak:  # a rate far above the traffic would flatten it: off the scale
            label += ",\n  above the panel: the traffic peaks at %.3f of it" % (peak / gbs)
            ax.set_ylim(0, max(peak, 1e-3) * 1.25)
        ax.axhline(gbs, color="tab:red", ls="--", label=label)
    else:
        ax.plot([], [], " ", label="no measured rate (%s)" % how)
    ax.set_title("d. %s traffic per second" % name)
    ax.set_ylabel("GB/s")
    ax.set_ylim(bottom=0)
    time_axis(ax, r)
    ax.legend(fontsize="small", loc="best")


def title(r):
    p50 = r.get("ttft_p50_ms")
    t = "kvbench: %s, %.1f s, %d turns, hit ratio %.1f%%" % (
        r.get("model", "?"), r.get("elapsed_s", 0), r.get("requests", 0),
        100 * num(r.get("hit_ratio", 0)))
    if p50 is not None:
        t += ", TTFT p50 %.1f ms with kvact, %.1f without, bound %.1f" % (
            p50, num(r.get("ttft_p50_ms_without_kvact")), num(r.get("ttft_bound_p50_ms")))
    return t


def draw(r):
    names = tier_names(r)
    n = 3 + len(names)
    rows = (n + 1) // 2
    fig, axes = plt.subplots(rows, 2, figsize=(14, 4.2 * rows), squeeze=False)
    flat = list(axes.flat)
    panel_hits(flat[0], r)
    panel_ttft(flat[1], r)
    panel_ecdf(flat[2], r)
    for ax, name in zip(flat[3:], names):
        panel_traffic(ax, r, name)
    for ax in flat[n:]:
        ax.remove()
    fig.suptitle(title(r))
    fig.tight_layout()
    return fig


def dump(fig):
    for ax in fig.axes:
        for line in ax.get_lines():
            print(json.dumps({"panel": ax.get_label(), "label": line.get_label(),
                              "x": [float(v) for v in line.get_xdata()],
                              "y": [float(v) for v in line.get_ydata()]}))


def main(argv):
    args, png, want_dump = [], None, False
    it = iter(argv)
    for a in it:
        if a == "--png":
            png = next(it, None)
        elif a == "--dump":
            want_dump = True
        elif a.startswith("-"):
            args = []
            break
        else:
            args.append(a)
    if not 1 <= len(args) <= 2 or (png is None and "--png" in argv):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    with open(args[0]) as f:
        r = json.load(f)
    fig = draw(r)
    if len(args) == 2:
        fig.savefig(args[1], format="svg", metadata={"Date": None})
    if png:
        fig.savefig(png, format="png", dpi=100)
    if want_dump:
        dump(fig)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
