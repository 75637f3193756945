"""The statistics of the 9B decisions gate (tools/decision_gate_9b.py) and of its decisive head's calibration
(tools/decisive_head.py): the standard library only, so that `decision_gate_9b.py selftest` checks them anywhere."""
import math

# Reference margins (p1 - p2, the lead of the reference's top option) at which the top-option agreement is also
# reported: below 0.05 a race is close enough that the BF16 noise of either side may decide it.
MARGIN_THRESHOLDS = (0.05, 0.2)
MARGIN_BINS = (0.0, 0.01, 0.05, 0.2, 0.5)  # histogram edges of margins; the last bin is [0.5, 1]
MAX_P_BINS = (0.0, 0.5, 0.6, 0.8, 0.9, 0.99, 0.999)  # of top probabilities: 0.6-0.99 is a decisive, unsaturated head
QUANTILES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)


def percentile(values, q):
    """Nearest rank, as `duet bench` computes it."""
    if not values:
        return None
    ordered = sorted(values)
    rank = math.ceil(q * len(ordered))
    return ordered[max(rank, 1) - 1]


def softmax(logits):
    top = max(logits)
    e = [math.exp(x - top) for x in logits]
    s = sum(e)
    return [x / s for x in e]


def kl(p, q):
    """KL(p || q) in nats, both clamped at 1e-30 as make_decision_fixtures.Checks does."""
    return sum(pi * (math.log(max(pi, 1e-30)) - math.log(max(qi, 1e-30))) for pi, qi in zip(p, q) if pi > 0)


def argmax(values):
    """The first maximum."""
    best = 0
    for i, v in enumerate(values):
        if v > values[best]:
            best = i
    return best


def top_gap(p):
    """p1 - p2: how far the top option leads the runner-up (1 for a single option)."""
    ordered = sorted(p, reverse=True)
    return ordered[0] - ordered[1] if len(ordered) > 1 else 1.0


def distribution(values, bins=MARGIN_BINS):
    """Quantiles (nearest rank) and a histogram of values in [0, 1] over bins (their lower edges)."""
    quantiles = {f"q{round(q * 100)}": percentile(values, q) for q in QUANTILES}
    edges = list(bins) + [math.inf]
    histogram = {}
    for lo, hi in zip(edges, edges[1:]):
        name = f"[{lo:g}, {hi:g})" if hi != math.inf else f"[{lo:g}, 1]"
        histogram[name] = sum(1 for v in values if lo <= v < hi)
    return {"count": len(values), "quantiles": quantiles, "histogram": histogram}


def agreement_by_margin(pairs, thresholds=MARGIN_THRESHOLDS):
    """pairs: (reference margin, same top option) per question. The plain agreement and, per threshold t, the
    agreement over the questions whose reference margin exceeds t (None where no question does)."""
    out = {"all": {"questions": len(pairs), "agreement": sum(s for _, s in pairs) / len(pairs) if pairs else None}}
    for t in thresholds:
        kept = [same for margin, same in pairs if margin > t]
        out[f"margin_over_{t:g}"] = {"questions": len(kept),
                                     "agreement": sum(kept) / len(kept) if kept else None}
    return out


def selftest():
    """Run by `decision_gate_9b.py selftest`."""
    d = distribution([0.0, 0.005, 0.03, 0.1, 0.3, 0.7, 1.0])
    assert d["count"] == 7 and d["quantiles"]["q50"] == 0.1 and d["quantiles"]["q0"] == 0.0
    assert list(d["histogram"].values()) == [2, 1, 1, 1, 2], d["histogram"]
    assert list(distribution([0.55, 0.95, 1.0], MAX_P_BINS)["histogram"].values()) == [0, 1, 0, 0, 1, 0, 1]
    a = agreement_by_margin([(0.01, False), (0.1, True), (0.3, True), (0.5, False)])
    assert a["all"] == {"questions": 4, "agreement": 0.5}
    assert a["margin_over_0.05"] == {"questions": 3, "agreement": 2 / 3}
    assert a["margin_over_0.2"] == {"questions": 2, "agreement": 0.5}
    assert agreement_by_margin([])["margin_over_0.2"] == {"questions": 0, "agreement": None}
