"""Paired comparison of benchmark runs taken in rounds.

This machine's speed drifts by tens of percent within minutes (other
tenants share it). Comparing the median of all "on" runs with the median
of all "off" runs mixes that drift into the result. Within one round the
copies run back to back, seconds apart, so the ratio of two copies in the
same round is mostly free of it. This module takes those per-round ratios,
reports their median, and gives a 95% bootstrap confidence interval for
that median (resampling rounds), so a verdict against a target says how
sure it is.

Used by the bench scripts that run rounds; standard library only.
"""

import random
import statistics


def median_ci(values, level=0.95, resamples=4000, seed=1):
    """Median of `values` and a percentile-bootstrap interval for it."""
    med = statistics.median(values)
    if len(values) < 3:
        return med, float("nan"), float("nan")
    rng = random.Random(seed)
    n = len(values)
    meds = sorted(
        statistics.median(rng.choices(values, k=n)) for _ in range(resamples)
    )
    lo = meds[int((1 - level) / 2 * resamples)]
    hi = meds[int((1 + level) / 2 * resamples) - 1]
    return med, lo, hi


def paired(rounds, a, b, key):
    """Per-round ratios a/b of `key`, for rounds that have both copies.

    `rounds` is a list of dicts copy -> {metric: value}.
    """
    return [r[a][key] / r[b][key] for r in rounds if a in r and b in r]


def paired_to_mean(rounds, a, bs, key):
    """Per-round ratios of a's `key` to the geometric mean of copies `bs`.

    With two untaped copies as controls, each has quirks of its own (two
    copies of one module have differed by a steady 1-2% in one daemon);
    their mean is a steadier reference than either.
    """
    out = []
    for r in rounds:
        if a in r and all(b in r for b in bs):
            mean = 1.0
            for b in bs:
                mean *= r[b][key]
            out.append(r[a][key] / mean ** (1 / len(bs)))
    return out


def cpu_rounds(runs, dur, hz):
    """Rounds from runs given as 'round:copy:req/s:p99 µs:CPU ticks', each
    lasting `dur` seconds at `hz` ticks a second: per copy its req/s, p99
    and daemon CPU µs per request."""
    rounds = {}
    for run in runs:
        i, d, r, p, t = run.split(":")
        rounds.setdefault(i, {})[d] = {
            "rps": int(r), "p99": int(p),
            "cpu": int(t) / int(hz) / (int(r) * float(dur)) * 1e6,
        }
    return list(rounds.values())


def median_of(rounds, copy, key):
    """The median over the rounds of one copy's `key`."""
    return statistics.median(r[copy][key] for r in rounds)


def cpu_cells(rounds, copy, against=None):
    """Markdown cells for one copy of `cpu_rounds`: median req/s, p99 and
    CPU per request, then (against another copy) the paired change of
    each, or empty cells."""
    med = lambda k: median_of(rounds, copy, k)
    ch = lambda k: change(paired(rounds, copy, against, k)) if against else ""
    return (f"{med('rps'):.0f} | {med('p99') / 1000:.2f} ms | {med('cpu'):.1f} µs | "
            f"{ch('rps')} | {ch('p99')} | {ch('cpu')}")


def pct(ratio):
    return f"{(ratio - 1) * 100:+.1f}%"


def change(ratios):
    """'median change [lo, hi]' as percentages, e.g. '-1.2% [-2.5%, +0.3%]'."""
    med, lo, hi = median_ci(ratios)
    if lo != lo:  # NaN: too few rounds for an interval
        return pct(med)
    return f"{pct(med)} [{pct(lo)}, {pct(hi)}]"


def ratio(ratios):
    """'median [lo, hi]' of plain ratios, two decimals."""
    med, lo, hi = median_ci(ratios)
    if lo != lo:
        return f"{med:.2f}"
    return f"{med:.2f} [{lo:.2f}, {hi:.2f}]"


if __name__ == "__main__":
    # Self-check: a known shift is found and its interval covers it; a
    # constant series has a zero-width interval.
    rng = random.Random(7)
    xs = [1.05 + rng.gauss(0, 0.02) for _ in range(40)]
    m, lo, hi = median_ci(xs)
    assert lo <= 1.05 <= hi and hi - lo < 0.03, (m, lo, hi)
    assert median_ci([2.0] * 10) == (2.0, 2.0, 2.0)
    rounds = [{"on": {"rps": 90.0}, "off": {"rps": 100.0}}] * 5
    assert paired(rounds, "on", "off", "rps") == [0.9] * 5
    three = [{"on": {"x": 90.0}, "off": {"x": 100.0}, "ctl": {"x": 81.0}}]
    assert [round(v, 9) for v in paired_to_mean(three, "on", ["off", "ctl"], "x")] == [1.0]
    assert change([0.9] * 5) == "-10.0% [-10.0%, -10.0%]"
    runs = [f"{i}:{c}:{r}:2000:{t}" for i in range(3) for c, r, t in
            (("off", 1000, 100), ("on", 800, 120))]
    cells = cpu_rounds(runs, "1", "100")
    assert cpu_cells(cells, "off") == "1000 | 2.00 ms | 1000.0 µs |  |  | ", cpu_cells(cells, "off")
    assert cpu_cells(cells, "on", "off").startswith("800 | 2.00 ms | 1500.0 µs | -20.0%"), cpu_cells(cells, "on", "off")
    print("ok")
