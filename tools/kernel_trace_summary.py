#!/usr/bin/env python3
"""Where a decode step's wall time goes, from a kernel timeline (tests/cuda/kernel_trace.cc's TSV).

A step is the span from one launch of the marker kernel (the sampler, which every step ends with) to the next; the
steps of the most common kernel count are the decode steps (prefill steps launch other kernels). For those: the step's
period, the GPU's busy time (the union of its kernels' intervals) and idle time, and each kernel's exclusive time (the
part of its interval no earlier kernel covers, so that the times add up to busy time even where dependent launches
overlap a kernel's start with its predecessor's end), by kernel and by kernel family (the name before its template
arguments). Nothing is timed on the host: the timestamps are the GPU's, from CUPTI.
With --with FAMILY the steps summarized are instead those that launch a kernel of that family (a prefill step's
walk, chunk_state_kernel: where a prompt's time goes, kernel by kernel).
  usage: tools/kernel_trace_summary.py TRACE.tsv [--marker sample_kernel] [--top 30] [--by-position] [--with FAMILY]
         tools/kernel_trace_summary.py --selftest      (ctest kernel_trace_summary_selftest)
"""
import argparse
import collections
import statistics
import sys


def read_trace(lines):
    kernels = []
    for line in lines:
        parts = line.rstrip("\n").split("\t", 4)
        if len(parts) == 5:
            kernels.append((int(parts[0]), int(parts[1]), parts[4]))
    kernels.sort()
    return kernels


def family(name):
    """The kernel's own name: no return type, namespaces, template arguments or parameters."""
    name = name.replace("(anonymous namespace)::", "").removeprefix("void ")
    cut = len(name)
    for sep in "<(":
        at = name.find(sep)
        if at > 0:
            cut = min(cut, at)
    return name[:cut].split("::")[-1]


def exclusive_times(kernels):
    """Each kernel's time not already covered by an earlier-starting kernel, in timeline order."""
    covered_to = 0
    out = []
    for start, end, _ in kernels:
        out.append(max(0, end - max(start, covered_to)))
        covered_to = max(covered_to, end)
    return out


def summarize(kernels, marker, with_family=None):
    """The decode steps' (or, with with_family, the steps that launch a kernel of that family) mean period, busy and
    launched time (ns) and per-name, per-family and per-gap totals (ns a step), or an error string."""
    exclusive = exclusive_times(kernels)
    marks = [i for i, k in enumerate(kernels) if marker in k[2]]
    if len(marks) < (2 if with_family else 3):
        return f"{len(marks)} launches of {marker}: no steps to measure"
    steps = [(marks[i - 1], marks[i]) for i in range(1, len(marks))]
    if with_family:
        steps = [(a, b) for a, b in steps if any(family(kernels[i][2]) == with_family for i in range(a, b))]
        if not steps:
            return f"no step launches {with_family}"
    count_mode = collections.Counter(b - a for a, b in steps).most_common(1)[0][0]
    decode = steps if with_family else [(a, b) for a, b in steps if b - a == count_mode]
    periods, busy, launched = [], [], []
    by_name, by_family, gaps = (collections.defaultdict(float) for _ in range(3))
    positions = collections.defaultdict(list)  # a step's i-th launch: (family, duration, exclusive time) each step
    for a, b in decode:
        periods.append(kernels[b][0] - kernels[a][0])
        busy.append(sum(exclusive[i] for i in range(a, b)))
        launched.append(sum(kernels[i][1] - kernels[i][0] for i in range(a, b)))
        reach = 0
        for i in range(a, b):
            by_name[kernels[i][2]] += exclusive[i] / len(decode)
            by_family[family(kernels[i][2])] += exclusive[i] / len(decode)
            # The GPU idle between this kernel's end (or an earlier one's, if later) and the next kernel's start.
            reach = max(reach, kernels[i][1])
            idle = kernels[i + 1][0] - reach
            if idle > 0:
                gaps[(family(kernels[i][2]), family(kernels[i + 1][2]))] += idle / len(decode)
            if b - a == count_mode:  # (launch positions line up only between steps of one count)
                positions[i - a].append((family(kernels[i][2]), kernels[i][1] - kernels[i][0], exclusive[i]))
    return {"kernels": len(kernels), "marks": len(marks), "steps": len(decode), "per_step": count_mode,
            "period": statistics.mean(periods), "median_period": statistics.median(periods),
            "busy": statistics.mean(busy), "launched": statistics.mean(launched),
            "by_name": by_name, "by_family": by_family, "gaps": gaps,
            "positions": [(p[0][0], statistics.median(d for _, d, _ in p), statistics.median(e for _, _, e in p))
                          for _, p in sorted(positions.items())]}


def report(s, marker, top, by_position=False, with_family=None):
    us = 1e3
    if with_family:
        print(f"{s['kernels']} kernels, {s['marks']} steps marked by {marker}; {s['steps']} steps launch {with_family} "
              f"({s['per_step']} kernels, the most common count among them)")
    else:
        print(f"{s['kernels']} kernels, {s['marks']} steps marked by {marker}; {s['steps']} decode steps of "
              f"{s['per_step']} kernels each (the most common count)")
    period, busy = s["period"], s["busy"]
    print(f"step period {period / us:.1f} us (median {s['median_period'] / us:.1f}), GPU busy {busy / us:.1f} us, "
          f"idle {(period - busy) / us:.1f} us = {100 * (1 - busy / period):.2f}% of the period (CUPTI's own host "
          f"work lengthens the turn between steps: DUET_STEP_GAPS=1 gives the host's share); kernels' own "
          f"durations add up to {s['launched'] / us:.1f} us (the excess over busy is overlap: dependent launches "
          f"waiting on their predecessor)")

    def table(title, totals):
        print(f"\n| {title} | us a step | share of busy |\n|---|---|---|")
        for name, ns in sorted(totals.items(), key=lambda kv: -kv[1])[:top]:
            print(f"| {name[:110]} | {ns / us:.1f} | {100 * ns / busy:.1f}% |")

    table("kernel family", s["by_family"])
    table("kernel", s["by_name"])
    print("\n| idle after -> before | us a step |\n|---|---|")
    for (left, right), ns in sorted(s["gaps"].items(), key=lambda kv: -kv[1])[:12]:
        print(f"| {left} -> {right} | {ns / us:.2f} |")
    if by_position:
        print("\n| launch of the step | kernel | duration us (median) | exclusive us (median) |\n|---|---|---|---|")
        for i, (name, duration, exclusive) in enumerate(s["positions"]):
            print(f"| {i} | {name} | {duration / us:.2f} | {exclusive / us:.2f} |")


def selftest():
    """A timeline built by hand, its answers worked out by hand: 4 steps of embed (1,000 ns), a GEMM (5,000) that
    starts 400 ns before embed ends (a dependent launch), and the sampler (2,000) 300 ns after the GEMM ends; 700 ns
    idle before the next step; one prefill step of another kernel count first, which must not count."""
    lines = ["0\t2000\t7\t0\tvoid duet::sample_kernel<2>(Args)\n", "2000\t50000\t7\t0\tvoid prefill_kernel<4>(int)\n",
             "50000\t52000\t7\t0\tvoid duet::sample_kernel<2>(Args)\n"]
    t = 52_700
    for _ in range(4):
        lines.append(f"{t}\t{t + 1_000}\t7\t0\tvoid embed(int)\n")
        lines.append(f"{t + 600}\t{t + 5_600}\t7\t3\tvoid skinny_gemm_tma_kernel<64, true>(Args)\n")
        lines.append(f"{t + 5_900}\t{t + 7_900}\t7\t4\tvoid duet::sample_kernel<2>(Args)\n")
        t += 7_900 + 700
    s = summarize(read_trace(reversed(lines)), "sample_kernel")  # any order in: sorted by start
    # Steps run sampler to sampler: the prefill's has 2 kernels (sampler, prefill), then 4 of 3 (sampler, embed, GEMM).
    expect = {"steps": 4, "per_step": 3, "period": 8_600, "busy": 2_000 + 1_000 + 4_600,
              "launched": 2_000 + 1_000 + 5_000}
    failures = [f"{key}: {s[key]} != {value}" for key, value in expect.items() if s[key] != value]
    if s["by_family"].get("skinny_gemm_tma_kernel") != 4_600:  # the 400 ns of overlap credited to embed
        failures.append(f"GEMM exclusive {s['by_family'].get('skinny_gemm_tma_kernel')} != 4600")
    if s["by_family"].get("embed") != 1_000 or s["by_family"].get("sample_kernel") != 2_000:
        failures.append(f"families {dict(s['by_family'])}")
    if [(name, d, e) for name, d, e in s["positions"]] != [("sample_kernel", 2_000, 2_000), ("embed", 1_000, 1_000),
                                                             ("skinny_gemm_tma_kernel", 5_000, 4_600)]:
        failures.append(f"positions {s['positions']}")
    if dict(s["gaps"]) != {("sample_kernel", "embed"): 700, ("skinny_gemm_tma_kernel", "sample_kernel"): 300}:
        failures.append(f"gaps {dict(s['gaps'])}")
    # --with: only the prefill step (sampler 0-2,000 then the prefill kernel to 50,000, its period sampler to sampler).
    p = summarize(read_trace(lines), "sample_kernel", with_family="prefill_kernel")
    if (p["steps"], p["per_step"], p["period"], p["busy"]) != (1, 2, 50_000, 50_000):
        failures.append(f"--with prefill_kernel: {p['steps']} steps of {p['per_step']}, {p['period']}, {p['busy']}")
    if summarize(read_trace(lines), "sample_kernel", with_family="no_such_kernel") != "no step launches no_such_kernel":
        failures.append("--with a family no step launches did not say so")
    # A planted control: without the overlap rule (each kernel's whole duration), busy would be off by the overlap.
    naive = sum(k[1] - k[0] for k in read_trace(lines[3:6]))
    if naive == s["busy"]:
        failures.append("the control did not differ: the overlap case is not exercised")
    for failure in failures:
        print("selftest FAILED:", failure)
    print("selftest:", "failed" if failures else "passed")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", nargs="?")
    parser.add_argument("--marker", default="sample_kernel", help="a kernel launched once a step (default the sampler)")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--by-position", action="store_true",
                        help="also each launch of a step in order: its median duration and exclusive time")
    parser.add_argument("--with", dest="with_family", metavar="FAMILY",
                        help="summarize the steps that launch a kernel of this family (e.g. chunk_state_kernel: "
                             "prefill steps) instead of the decode steps")
    parser.add_argument("--selftest", action="store_true")
    args = parser.parse_args()
    if args.selftest:
        return selftest()
    if not args.trace:
        parser.error("a trace, or --selftest")
    with open(args.trace) as f:
        kernels = read_trace(f)
    summary = summarize(kernels, args.marker, args.with_family)
    if isinstance(summary, str):
        sys.exit(f"{args.trace}: {summary}")
    report(summary, args.marker, args.top, args.by_position, args.with_family)
    return 0


if __name__ == "__main__":
    sys.exit(main())
