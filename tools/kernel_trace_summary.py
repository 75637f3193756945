#!/usr/bin/env python3
"""Where a decode step's wall time goes, from a kernel timeline (tests/cuda/kernel_trace.cc's TSV).

A step is the span from one launch of the marker kernel (the sampler, which every step ends with) to the next; the
steps of the most common kernel count are the decode steps (prefill steps launch other kernels). For those: the step's
period, the GPU's busy time (the union of its kernels' intervals) and idle time, and each kernel's exclusive time (the
part of its interval no earlier kernel covers, so that the times add up to busy time even where dependent launches
overlap a kernel's start with its predecessor's end), by kernel and by kernel family (the name before its template
arguments). Nothing is timed on the host: the timestamps are the GPU's, from CUPTI.
  usage: tools/kernel_trace_summary.py TRACE.tsv [--marker sample_kernel] [--top 30]
"""
import argparse
import collections
import statistics
import sys


def read_trace(path):
    kernels = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t", 4)
            if len(parts) == 5:
                kernels.append((int(parts[0]), int(parts[1]), parts[4]))
    kernels.sort()
    return kernels


def family(name):
    cut = len(name)
    for sep in "<(":
        at = name.find(sep)
        if at > 0:
            cut = min(cut, at)
    return name[:cut].replace("void ", "").split("::")[-1]


def exclusive_times(kernels):
    """Each kernel's time not already covered by an earlier-starting kernel, in timeline order."""
    covered_to = 0
    out = []
    for start, end, _ in kernels:
        out.append(max(0, end - max(start, covered_to)))
        covered_to = max(covered_to, end)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace")
    parser.add_argument("--marker", default="sample_kernel", help="a kernel launched once a step (default the sampler)")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()

    kernels = read_trace(args.trace)
    if not kernels:
        sys.exit(f"{args.trace}: no kernels")
    exclusive = exclusive_times(kernels)
    marks = [i for i, k in enumerate(kernels) if args.marker in k[2]]
    if len(marks) < 3:
        sys.exit(f"{args.trace}: {len(marks)} launches of {args.marker}: no steps to measure")
    steps = [(marks[i - 1], marks[i]) for i in range(1, len(marks))]
    count_mode = collections.Counter(b - a for a, b in steps).most_common(1)[0][0]
    decode = [(a, b) for a, b in steps if b - a == count_mode]
    print(f"{len(kernels)} kernels, {len(marks)} steps marked by {args.marker}; {len(decode)} decode steps of "
          f"{count_mode} kernels each (the most common count)")

    periods, busy, launched = [], [], []
    by_name = collections.defaultdict(int)
    by_family = collections.defaultdict(int)
    gaps = collections.defaultdict(int)
    for a, b in decode:
        period = kernels[b][0] - kernels[a][0]
        periods.append(period)
        step_busy = sum(exclusive[i] for i in range(a, b))
        busy.append(step_busy)
        launched.append(sum(kernels[i][1] - kernels[i][0] for i in range(a, b)))
        reach = 0
        for i in range(a, b):
            by_name[kernels[i][2]] += exclusive[i]
            by_family[family(kernels[i][2])] += exclusive[i]
            # The GPU idle between this kernel's end (or an earlier one's, if later) and the next kernel's start.
            reach = max(reach, kernels[i][1])
            idle = kernels[i + 1][0] - reach
            if idle > 0:
                gaps[(family(kernels[i][2]), family(kernels[i + 1][2]))] += idle

    n = len(decode)
    period_us = statistics.mean(periods) / 1e3
    busy_us = statistics.mean(busy) / 1e3
    print(f"step period {period_us:.1f} us (median {statistics.median(periods) / 1e3:.1f}), GPU busy {busy_us:.1f} us, "
          f"idle {period_us - busy_us:.1f} us = {100 * (1 - busy_us / period_us):.2f}% of the period; kernels' own "
          f"durations add up to {statistics.mean(launched) / 1e3:.1f} us (the excess over busy is overlap: dependent "
          f"launches waiting on their predecessor)")

    def table(title, totals, top):
        print(f"\n| {title} | us a step | share of busy |\n|---|---|---|")
        for name, ns in sorted(totals.items(), key=lambda kv: -kv[1])[:top]:
            print(f"| {name[:110]} | {ns / n / 1e3:.1f} | {100 * ns / n / 1e3 / busy_us:.1f}% |")

    table("kernel family", by_family, args.top)
    table("kernel", by_name, args.top)
    print("\n| idle after -> before | us a step |\n|---|---|")
    for (left, right), ns in sorted(gaps.items(), key=lambda kv: -kv[1])[:12]:
        print(f"| {left} -> {right} | {ns / n / 1e3:.2f} |")


if __name__ == "__main__":
    main()
