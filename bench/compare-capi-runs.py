#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Medians of alternating capi_bench runs, this build against another.

make -C tests bench-guest-compare OLD=DIR boots one guest and runs
capi_bench --quick --monitor kernel from this build and from DIR in turn
(this build's run first in every pair); run-in-guest.sh leaves each run's
output in RESULTS/N.out. This prints, per pattern, the median ns per request
of each build with its range, ucs_rcache's median, and the medians of the
speedups, which are what compare across runs under emulation: each run
times ucs_rcache beside us, so a slow moment of the emulator moves both.
"""
import os
import statistics
import sys


def runs(results):
    """[(index, {pattern: (ours_ns, ucs_ns)})] of every N.out, by N."""
    out = []
    for name in os.listdir(results):
        stem, ext = os.path.splitext(name)
        if ext != ".out" or not stem.isdigit():
            continue
        rows = {}
        with open(os.path.join(results, name)) as f:
            for line in f:
                p = line.split()
                # pattern requests ours ucs speedup regs regs
                if len(p) == 7 and p[1].isdigit():
                    rows[p[0]] = (float(p[2]), float(p[3]))
        out.append((int(stem), rows))
    return sorted(out)


def describe(samples):
    ours = [a for a, _ in samples]
    ucs = [b for _, b in samples]
    speedup = [b / a for a, b in samples]
    return (f"{statistics.median(ours):8.1f} ({min(ours):.1f}-{max(ours):.1f})"
            f"  ucs {statistics.median(ucs):7.1f}"
            f"  {statistics.median(speedup):.2f}x ({min(speedup):.2f}-{max(speedup):.2f})")


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: compare-capi-runs.py RESULTS NEW-LABEL OLD-LABEL")
    results, new_label, old_label = sys.argv[1:]
    by_build = {new_label: {}, old_label: {}}
    all_runs = runs(results)
    if not all_runs or len(all_runs) % 2:
        sys.exit(f"compare-capi-runs.py: {results} holds {len(all_runs)} runs, not pairs")
    for n, rows in all_runs:
        label = new_label if n % 2 == 1 else old_label
        for pattern, sample in rows.items():
            by_build[label].setdefault(pattern, []).append(sample)
    patterns = list(dict.fromkeys(p for _, rows in all_runs for p in rows))
    print(f"{len(all_runs) // 2} alternating pairs; ns per request, median (range), "
          "ucs_rcache's median, speedup over ucs_rcache median (range)")
    for pattern in patterns:
        for label in (old_label, new_label):
            samples = by_build[label].get(pattern)
            text = describe(samples) if samples else "   (not in this build)"
            print(f"{pattern:12} {label:10} {text}")


if __name__ == "__main__":
    main()
