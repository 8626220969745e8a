#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""What each part of a cache hit costs: builds copies of this tree with one
part of the hit path cut, and measures them beside the tree as it is.

    bench/ablate-hit.py BUILDDIR [--rounds N] [--work DIR] [--no-count]
                        [CUT ...]

For each CUT (default: the parts and their combinations) it copies the
source tree (the working tree, uncommitted changes included, without .git
and build directories) to WORK/CUT, applies the cut to lib/src, configures the copy as BUILDDIR
was configured (config.status --config), and builds the library and
bench/cache_bench. Then:

- instructions a get + put at 1e2 entries, for BUILDDIR and every cut,
  counted with valgrind's cachegrind (cache_bench --profile=100,1 and
  --profile=100,8: the difference in instructions over the difference in
  hits, so that setup cancels out); --no-count skips it;
- N rounds (default 5) of cache_bench --quick over BUILDDIR and the cuts
  in turn, and per build the medians of: ns per get + put at 1e2 and 1e4
  in random order, the speedup over ucs_rcache measured in the same run,
  the ratio to the floor, and two threads' scaling on the same entries.

A cut makes the hit wrong or unsafe (that is the point: it prices what
the part buys); the copies are for measuring, never for use. A cut whose
source text is no longer in the tree stops the script with the text it
looked for, to be brought up to date with the hit path.

Time it on a quiet machine: nothing else running, no guests, no helpers.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CACHE_H = "lib/src/cache.h"
READER_LOCK_H = "lib/src/reader_lock.h"



def no_read_section(record):
    """read() runs fn at once, as the thread's outermost section on
    `record` (an expression), with no writer check."""
    entry = "\t\tconst unsigned idx = tls_reader.index;\n"
    return [(READER_LOCK_H, entry,
             f"\t\tif (true)\n\t\t\treturn fn(ReadSection<true>({record}, 0));\n" + entry)]


# (file, text in the tree, replacement) for each part of the hit.
PARTS = {
    # The per-thread hit counter behind mrn_stats.
    "statistics": [(CACHE_H,
                    "h.n.store(h.n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);\n"
                    "\t\tif (by_word)\n"
                    "\t\t\th.by_word.store(h.by_word.load(std::memory_order_relaxed) + 1,\n"
                    "\t\t\t\t\tstd::memory_order_relaxed);",
                    "(void)h, (void)by_word;")],
    # The check that the cache has seen every invalidation (a hit after
    # an unmap would return the stale entry).
    "generation": [(CACHE_H,
                    "if (load_generation(gen_ptr_.load(std::memory_order_relaxed)) !=\n"
                    "\t\t\t    seen_gen_.load(std::memory_order_relaxed))\n"
                    "\t\t\t\treturn nullptr;",
                    "")],
    # The entry's own validity word once the generation moved (#47), on
    # the way from a hit that found the generation moved to the slow path:
    # the library before it went straight to the slow path and drained.
    "words": [(CACHE_H, "return get_not_fresh(s, e, access, arg, out);",
               "return get_slow(s, e, access, arg, out);")],
    # The LRU stamp a put leaves (eviction order).
    "lru": [(CACHE_H, "const uint32_t stamp = lru_stamp();", "const uint32_t stamp = 0;")],
    # Per-thread reference deltas: every get and put an atomic add on the
    # entry's count instead.
    "deltas": [(CACHE_H, "!deltas_.get(section.index(), c))", "true)"),
               (CACHE_H, "!deltas_.put(section.index(), x, stamp)) {", "true) {")],
    # No read section: a writer may free the entry under the hit. The
    # thread's record index still comes from thread-local storage.
    "section-tls": no_read_section("ReaderRecords::my_index()"),
    # No read section, and every thread on record 0's delta table.
    "section": no_read_section("0"),
    # Not parts of the hit's purpose, but steps of it that cost something:
    # the readers' test for a missing membarrier (they then make a fence
    # of their own); a copy that always trusts the writers' membarrier.
    "fence-test": [(READER_LOCK_H,
                    "\t\tif (ReaderRecords::asymmetric())\n"
                    "\t\t\tstd::atomic_signal_fence(std::memory_order_seq_cst);\n"
                    "\t\telse\n"
                    "\t\t\tstd::atomic_thread_fence(std::memory_order_seq_cst);\n",
                    "\t\tstd::atomic_signal_fence(std::memory_order_seq_cst);\n")],
    # A delta slot taken over from another entry leaves that entry its
    # LRU stamp (reading the other entry's line).
    "write-back": [("lib/src/ref_deltas.h", "\t\tif (held)\n\t\t\twrite_back(s, held);\n", "")],
}
CUTS = dict(PARTS)
# What is left of a hit that keeps only its safety (the read section and
# the generation check).
CUTS["bare"] = PARTS["statistics"] + PARTS["lru"] + PARTS["deltas"]
CUTS["all"] = CUTS["bare"] + PARTS["generation"] + PARTS["section"]
# The default: the parts and their combinations, not the steps.
DEFAULT_CUTS = [c for c in CUTS if c not in ("fence-test", "write-back")]


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, **kw)


def copy_tree(top, dest):
    """The working tree's files, as git lists them, into dest; outside git
    (a release tarball), every file but build directories'."""
    try:
        files = sh(["git", "-C", top, "ls-files", "-z", "--cached", "--others",
                    "--exclude-standard"], capture_output=True).stdout.split("\0")
    except (OSError, subprocess.CalledProcessError):
        def builds(d, names):
            return names if d != top and "config.status" in names else []
        shutil.copytree(top, dest, ignore=builds, dirs_exist_ok=True)
        return
    for f in filter(None, files):
        src = os.path.join(top, f)
        if not os.path.isfile(src):
            continue
        os.makedirs(os.path.dirname(os.path.join(dest, f)), exist_ok=True)
        shutil.copy2(src, os.path.join(dest, f))


def apply_cut(src, name):
    for path, old, new in CUTS[name]:
        p = os.path.join(src, path)
        with open(p) as f:
            text = f.read()
        if text.count(old) != 1:
            sys.exit(f"ablate-hit.py: cut '{name}': {path} holds {text.count(old)} copies of\n"
                     f"    {old!r}\n(the hit path changed: bring PARTS up to date)")
        with open(p, "w") as f:
            f.write(text.replace(old, new))


def build_cut(top, build, work, name):
    """WORK/NAME/{src,build}, configured as BUILD was; its build dir."""
    base = os.path.join(work, name)
    shutil.rmtree(base, ignore_errors=True)
    src, bld = os.path.join(base, "src"), os.path.join(base, "build")
    copy_tree(top, src)
    apply_cut(src, name)
    os.makedirs(bld)
    args = sh(["./config.status", "--config"], cwd=build, capture_output=True).stdout
    with open(os.path.join(base, "build.log"), "w") as log:
        try:
            if not os.path.exists(os.path.join(src, "configure")):
                sh(["./autogen.sh"], cwd=src, stdout=log, stderr=log)
            sh(["sh", "-c", f"../src/configure {args}"], cwd=bld, stdout=log, stderr=log)
            sh(["make", f"-j{os.cpu_count() or 1}", "-C", "lib"], cwd=bld, stdout=log, stderr=log)
            sh(["make", "-C", "bench", "cache_bench"], cwd=bld, stdout=log, stderr=log)
        except subprocess.CalledProcessError:
            sys.exit(f"ablate-hit.py: building cut '{name}' failed: {log.name}")
    return bld


def instructions_per_hit(build):
    """Marginal instructions a get + put at 1e2 entries (cachegrind)."""
    def run(seconds):
        with tempfile.NamedTemporaryFile() as out:
            r = sh(["valgrind", "--tool=cachegrind", "--cache-sim=no",
                    f"--cachegrind-out-file={out.name}",
                    os.path.join(build, "bench/cache_bench"), f"--profile=100,{seconds}"],
                   capture_output=True)
        text = r.stdout + r.stderr
        hits = int(re.search(r" over (\d+) hits", text).group(1))
        instr = int(re.search(r"I\s+refs:\s+([\d,]+)", text).group(1).replace(",", ""))
        return hits, instr
    h1, i1 = run(1)
    h2, i2 = run(8)
    return (i2 - i1) / (h2 - h1)


def quick_run(build):
    """{1e2, 1e4: (ours, ucs, floor)}, two threads' scaling: one --quick run."""
    out = sh([os.path.join(build, "bench/cache_bench"), "--quick"], capture_output=True).stdout
    rows, scaling = {}, None
    for line in out.splitlines():
        p = line.split()
        if len(p) >= 9 and p[1] == "random" and p[0] in ("100", "10000"):
            rows[p[0]] = (float(p[2]), float(p[3]), float(p[7]))
        m = re.search(r"hit throughput, 1e4 entries, random: mrnotify .*?scaling ([\d.]+)x", line)
        if m:
            scaling = float(m.group(1))
    if len(rows) != 2 or scaling is None:
        sys.exit(f"ablate-hit.py: no hit rows in {build}'s cache_bench --quick:\n{out}")
    return rows, scaling


def med(xs, digits=1):
    return f"{statistics.median(xs):5.{digits}f} ({min(xs):.{digits}f}-{max(xs):.{digits}f})"


def machine():
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    return f"{model}, {os.cpu_count()} CPUs, Linux {os.uname().release}, load {load} before the builds"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build", metavar="BUILDDIR")
    ap.add_argument("cuts", metavar="CUT", nargs="*",
                    help=f"default: {', '.join(DEFAULT_CUTS)}; also fence-test, write-back")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "mrnotify-ablate"))
    ap.add_argument("--no-count", action="store_true", help="skip the cachegrind counts")
    a = ap.parse_args()
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    build = os.path.abspath(a.build)
    if not os.access(os.path.join(build, "bench/cache_bench"), os.X_OK):
        sys.exit(f"ablate-hit.py: {build}/bench/cache_bench is missing (make -C {build}/bench)")
    for c in a.cuts:
        if c not in CUTS:
            sys.exit(f"ablate-hit.py: no cut '{c}' (cuts: {', '.join(CUTS)})")
    if not a.no_count and not shutil.which("valgrind"):
        sys.exit("ablate-hit.py: valgrind is missing (apt-get install valgrind, or --no-count)")
    cuts = a.cuts or DEFAULT_CUTS
    commit = subprocess.run(["git", "-C", top, "describe", "--always", "--dirty"],
                            capture_output=True, text=True).stdout.strip() or "?"
    header = f"# bench/ablate-hit.py, {time.strftime('%Y-%m-%d', time.gmtime())}, {commit}, {machine()}"
    builds = {"(none)": build}
    for c in cuts:
        print(f"building cut '{c}' in {a.work}/{c}", file=sys.stderr)
        builds[c] = build_cut(top, build, a.work, c)

    counts = {}
    if not a.no_count:
        for name, b in builds.items():
            counts[name] = instructions_per_hit(b)
    samples = {name: [] for name in builds}
    for r in range(a.rounds):
        print(f"round {r + 1} of {a.rounds}", file=sys.stderr)
        for name, b in builds.items():
            samples[name].append(quick_run(b))

    print(header)
    print(f"# cuts: {' '.join(cuts)}")
    print(f"# {a.rounds} rounds of cache_bench --quick, builds in turn; instr: a get + put"
          " at 1e2 (cachegrind, marginal);")
    print("# medians (ranges); x ucs: ucs_rcache's time in the same run over ours;"
          " x floor: ours over the floor's")
    print(f"{'cut':12} {'instr':>6}  {'1e2 random ns':17} {'x ucs':>5} {'x floor':>7}"
          f"  {'1e4 random ns':17} {'x ucs':>5} {'x floor':>7}  two threads")
    for name, s in samples.items():
        cols = []
        for n in ("100", "10000"):
            ours = [rows[n][0] for rows, _ in s]
            vs_ucs = statistics.median(rows[n][1] / rows[n][0] for rows, _ in s)
            vs_floor = statistics.median(rows[n][0] / rows[n][2] for rows, _ in s)
            cols.append(f"{med(ours):17} {vs_ucs:4.2f}x {vs_floor:6.2f}x")
        instr = f"{counts[name]:6.1f}" if name in counts else "     -"
        print(f"{name:12} {instr}  {cols[0]}  {cols[1]}  {med([t for _, t in s], 2)}x")


if __name__ == "__main__":
    main()
