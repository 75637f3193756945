#!/usr/bin/env python3
"""What the decisions gate's "4 at once" column can be at best, given each bucket's latency alone.

The gate (tools/decision_gate_9b.py) sends its requests from four closed-loop clients, in round-robin bucket order.
One GPU whose prefill is compute-bound conserves work: each request needs its alone time of GPU time whatever else
runs, so by Little's law the mean latency is at least clients x mean(alone). This models that load under three
scheduling policies (first come first served, processor sharing, preemptive shortest remaining first) and prints each
bucket's median latency and its ratio to alone.

  tools/decisions_at_once_bound.py [ALONE_MS ...] [--per-bucket N] [--clients C]
  (default: the sixteenth round's alone p50s 45.5 95.1 257.3 537.1 ms, 4 a bucket, 4 clients)
"""
import argparse
import statistics


def simulate(alone, order, clients, policy, dt=0.05):
    queue = list(enumerate(order))
    running, done, t = {}, {}, 0.0
    for _ in range(clients):
        if queue:
            i, b = queue.pop(0)
            running[i] = [b, alone[b], t]
    while running:
        if policy == "fcfs":
            served = [min(running)]
        elif policy == "ps":
            served = list(running)
        else:  # srpt
            served = [min(running, key=lambda i: (running[i][1], i))]
        for i in served:
            running[i][1] -= dt / len(served)
        t += dt
        for i in [i for i in running if running[i][1] <= 1e-9]:
            b, _, start = running.pop(i)
            done[i] = (b, t - start)
            if queue:
                j, bj = queue.pop(0)
                running[j] = [bj, alone[bj], t]
    return [statistics.median(l for bb, l in done.values() if bb == b) for b in range(len(alone))]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("alone", nargs="*", type=float, default=[45.5, 95.1, 257.3, 537.1])
    parser.add_argument("--per-bucket", type=int, default=4)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    order = [b for _ in range(args.per_bucket) for b in range(len(args.alone))]
    mean = statistics.mean(args.alone)
    print(f"Little's law: mean latency >= {args.clients} x {mean:.1f} = {args.clients * mean:.1f} ms without a "
          f"throughput gain from running decisions together; every bucket within 1.5x of alone needs <= "
          f"{1.5 * mean:.1f} ms")
    for policy in ("fcfs", "ps", "srpt"):
        p50 = simulate(args.alone, order, args.clients, policy)
        print(f"{policy:5s} p50 " + " / ".join(f"{x:7.1f}" for x in p50) + " ms, ratio to alone " +
              " / ".join(f"{x / a:4.2f}" for x, a in zip(p50, args.alone)))


if __name__ == "__main__":
    main()
