#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Draws the plots of bench/records/README.md from recorded benchmark output.

Usage: plot-bench.py RECORD... OUTDIR

Each RECORD is a file written by bench/record-bench.sh (or by hand in its
format, for runs in a guest): a header of "# key: value" lines (date,
machine, commit, command) and each benchmark's output after a
"## <command>" line. Draws, into OUTDIR, the plots whose benchmark a record
holds:
  hits.svg      hit latency (get + put) of libmrnotify, ucs_rcache and the
                floor, by number of entries and order (cache_bench)
  patterns.svg  ns per request through the C API against ucs_rcache, by
                access pattern (capi_bench)
  fork.svg      fork() time with 1 GiB registered, by fork policy (fork_bench)
  ofi.svg       a hit in libfabric's MR cache per memory monitor, and the
                time until a batch of unmapped entries is dropped (ofi_bench)
Each plot is captioned with the record's date, machine and commit.
"""
import re
import sys

import matplotlib

matplotlib.use("Agg")  # files only: CI machines have no display
import matplotlib.pyplot as plt  # noqa: E402


def sections(path):
    header, parts, current = {}, {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("## "):
                current = line[3:].strip()
                parts[current] = []
            elif current is None and line.startswith("# ") and ":" in line:
                key, value = line[2:].split(":", 1)
                header[key.strip()] = value.strip()
            elif current is not None:
                parts[current].append(line)
    return header, parts


def find(parts, name):
    for command, lines in parts.items():
        if name in command.split()[0]:
            return command, lines
    raise SystemExit(f"plot-bench.py: no {name} output in the record")


def caption(header, command):
    return (f"{command} — {header.get('date', '?')}, {header.get('machine', '?')}, "
            f"commit {header.get('commit', '?')}")


def plot_hits(header, parts, out):
    command, lines = find(parts, "cache_bench")
    # Records made before the UCP column (lookup_unsafe) lack it; rows
    # where this build could not time it show "-".
    row = re.compile(r"^(\d+)\s+(sequential|random|chain)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+x"
                     r"(?:\s+(?:([\d.]+)\s+[\d.]+x|-\s+-))?\s+([\d.]+)\s+[\d.]+x\s*$")
    labels, ours, ucs, ucp, floor = [], [], [], [], []
    for line in lines:
        m = row.match(line)
        if m:
            labels.append(f"{int(m.group(1)):.0e}\n{m.group(2)}")
            ours.append(float(m.group(3)))
            ucs.append(float(m.group(4)))
            ucp.append(float(m.group(5)) if m.group(5) else None)
            floor.append(float(m.group(6)))
    if not labels:
        raise SystemExit("plot-bench.py: no hit rows in cache_bench's output")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    x = range(len(labels))
    bars = [("ucs_rcache_get (UCX)", ucs)]
    if all(v is not None for v in ucp):
        bars.append(("ucs_rcache_lookup_unsafe (UCP's hit)", ucp))
    bars += [("libmrnotify", ours), ("floor (2 loads + 2 atomics)", floor)]
    w = 0.8 / len(bars)
    for k, (label, values) in enumerate(bars):
        ax.bar([i + (k - (len(bars) - 1) / 2) * w for i in x], values, w, label=label)
    ax.set_xticks(list(x), labels)
    ax.set_ylabel("ns per get + put (lower is better)")
    ax.set_title("Registration cache hits, by entries and order")
    ax.legend()
    fig.text(0.01, 0.01, caption(header, command), fontsize=7)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(f"{out}/hits.svg")


def plot_patterns(header, parts, out):
    command, lines = find(parts, "capi_bench")
    row = re.compile(r"^([a-z-]+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+x")
    names, ours, ucs = [], [], []
    for line in lines:
        m = row.match(line)
        if m:
            names.append(m.group(1))
            ours.append(float(m.group(3)))
            ucs.append(float(m.group(4)))
    if not names:
        raise SystemExit("plot-bench.py: no pattern rows in capi_bench's output")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    x = range(len(names))
    w = 0.38
    ax.bar([i - w / 2 for i in x], ucs, w, label="ucs_rcache (UCX)")
    ax.bar([i + w / 2 for i in x], ours, w, label="libmrnotify (C API)")
    ax.set_xticks(list(x), names)
    ax.set_yscale("log")
    ax.set_ylabel("ns per request (log scale, lower is better)")
    ax.set_title("Access patterns through the public API")
    ax.legend()
    fig.text(0.01, 0.01, caption(header, command), fontsize=7)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(f"{out}/patterns.svg")


def plot_fork(header, parts, out):
    command, lines = find(parts, "fork_bench")
    row = re.compile(r"^\s+(nothing registered|registered, \w+)\s+([\d.]+) ms")
    names, ms = [], []
    for line in lines:
        m = row.match(line)
        if m:
            names.append(m.group(1))
            ms.append(float(m.group(2)))
    if not names:
        raise SystemExit("plot-bench.py: no rows in fork_bench's output")
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.barh(names, ms)
    ax.set_xscale("log")
    ax.set_xlabel("ms per fork() + exit + wait (log scale)")
    ax.set_title("fork() with 1 GiB registered (pinned), by fork policy")
    for i, v in enumerate(ms):
        ax.text(v, i, f" {v:g} ms", va="center")
    fig.text(0.01, 0.01, caption(header, command), fontsize=7)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(f"{out}/fork.svg")


def plot_ofi(header, parts, out):
    command, lines = find(parts, "ofi_bench")
    values = dict(re.findall(r"^(\w+)=([\d.]+)$", "\n".join(lines), re.M))
    monitors = [("mrnotify", "mrnotify.ko (ours)"), ("memhooks", "memhooks"),
                ("userfaultfd", "userfaultfd")]
    try:
        hit = [float(values[f"hit_ns_{m}"]) for m, _ in monitors]
        dropped = [float(values[f"batch_dropped_us_{m}"]) for m, _ in monitors]
        unmapped = [float(values[f"batch_munmap_us_{m}"]) for m, _ in monitors]
    except KeyError as e:
        raise SystemExit(f"plot-bench.py: ofi_bench's output lacks {e}")
    names = [label for _, label in monitors]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 4))
    left.bar(names, hit)
    left.set_ylabel("ns per fi_mr_reg + fi_close hit")
    left.set_title("A hit in the verbs MR cache")
    for i, v in enumerate(hit):
        left.text(i, v, f"{v:.0f}", ha="center", va="bottom")
    x = range(len(names))
    w = 0.38
    right.bar([i - w / 2 for i in x], unmapped, w, label="munmap() returns")
    right.bar([i + w / 2 for i in x], dropped, w, label="every cache dropped them")
    right.set_xticks(list(x), names)
    right.set_ylabel("µs after munmap() began")
    right.set_title("1,000 cached buffers unmapped at once")
    right.legend()
    fig.text(0.01, 0.01, caption(header, command), fontsize=7)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(f"{out}/ofi.svg")


PLOTS = {"cache_bench": plot_hits, "capi_bench": plot_patterns, "fork_bench": plot_fork,
         "ofi_bench": plot_ofi}


def main():
    if len(sys.argv) < 3:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    out = sys.argv[-1]
    for record in sys.argv[1:-1]:
        header, parts = sections(record)
        benches = {command.split()[0].split("/")[-1] for command in parts}
        for name, plot in PLOTS.items():
            if name in benches:
                plot(header, parts, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
