#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Draws docs/performance.md's plots from recorded benchmark output.

Usage: plot-bench.py RECORD OUTDIR

RECORD is a file written by bench/record-bench.sh: a header of "# key: value"
lines (date, machine, commit, command) and each benchmark's output after a
"## <command>" line. Writes into OUTDIR:
  hits.svg      hit latency (get + put) of libmrnotify, ucs_rcache and the
                floor, by number of entries and order (cache_bench)
  patterns.svg  ns per request through the C API against ucs_rcache, by
                access pattern (capi_bench)
  fork.svg      fork() time with 1 GiB registered, by fork policy (fork_bench)
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
    row = re.compile(r"^(\d+)\s+(sequential|random)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+x\s+([\d.]+)")
    labels, ours, ucs, floor = [], [], [], []
    for line in lines:
        m = row.match(line)
        if m:
            labels.append(f"{int(m.group(1)):.0e}\n{m.group(2)}")
            ours.append(float(m.group(3)))
            ucs.append(float(m.group(4)))
            floor.append(float(m.group(5)))
    if not labels:
        raise SystemExit("plot-bench.py: no hit rows in cache_bench's output")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    x = range(len(labels))
    w = 0.27
    ax.bar([i - w for i in x], ucs, w, label="ucs_rcache (UCX)")
    ax.bar(x, ours, w, label="libmrnotify")
    ax.bar([i + w for i in x], floor, w, label="floor (2 loads + 2 atomics)")
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


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    header, parts = sections(sys.argv[1])
    plot_hits(header, parts, sys.argv[2])
    plot_patterns(header, parts, sys.argv[2])
    plot_fork(header, parts, sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
