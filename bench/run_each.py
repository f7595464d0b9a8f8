#!/usr/bin/python3
"""Runs fuse_bench once per workload (with the STREAM rows) and prints the summary tables joined.

Why: on the 2-vCPU EPYC VM of bench/README.md, in one run of every row (every workload's
buffers, several GB, alive at once, all repetitions interleaved; the cause is not pinned down)
on an otherwise idle machine (2026-11-24), the medians of rows running the very same single kernel (a
workload's fused and unfused rows) differed by up to 8.7x (max_10M: 10.3 against 1.18 ms) while
their best repetitions agreed. Run one workload at a time, the same pairs differed by at most
1.31x in two runs (sum_100M: 8.20 against 6.27 ms). Each row here comes from its own process
(and its compile-latency rows from another): compare ratios within a row (fuse and its peers ran
together), not times across rows.

With --rounds N, every selected workload runs N times, round by round (each round runs them all
in turn, so that a slow spell of a shared host falls on every row alike), each round's tables are
printed, and then the best peer / fuse ratio of every round and their median per workload: on the
Xeon VM of bench/README.md one run's ratio moved by 0.3 between runs minutes apart with the same
kernels (softmax_65536x64 1.08 and 1.46).

    bench/run_each.py [--binary build/bench/fuse_bench] [--filter REGEX] [--rounds N] [fuse_bench flags...]
"""
import statistics
import argparse
import os
import re
import subprocess
import sys


def workloads(binary):
    listed = subprocess.run([binary, "--benchmark_list_tests"], capture_output=True, text=True, check=True).stdout
    names = []
    for line in listed.splitlines():
        m = re.match(r"^([A-Za-z0-9_]+)/(fused|unfused)", line)
        if m and m.group(1) not in names:
            names.append(m.group(1))
    return names


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def tables(text):
    """The Markdown tables of one run's summary: {header cells: [alignment cells, row cells...]}."""
    found, header = {}, None
    for line in text.splitlines():
        if line.startswith("| workload"):
            header = tuple(cells(line))
            found.setdefault(header, [])
        elif header and line.startswith("| "):
            found[header].append(cells(line))  # the first is the alignment row
        else:
            header = None
    return found


def markdown(header, rows):
    """One table, columns padded to their widest cell (numbers right-aligned, as fuse_bench prints)."""
    align, body = rows[0], rows[1:]
    widths = [max(len(r[c]) for r in [list(header)] + body) for c in range(len(header))]
    widths = [max(w, 3) for w in widths]
    def line(r):
        return "| " + " | ".join(v.ljust(w) if a.startswith(":") and not a.endswith(":") else v.rjust(w)
                                 for v, w, a in zip(r, widths, align)) + " |"
    marks = [(":" + "-" * (w - 1)) if a.startswith(":") and not a.endswith(":") else ("-" * (w - 1) + ":")
             for w, a in zip(widths, align)]
    return "\n".join([line(header), "| " + " | ".join(marks) + " |"] + [line(r) for r in body])


def run_round(binary, names, passthrough):
    """Every workload in `names` once: (joined tables {header: rows} in order of appearance, context lines, status)."""
    joined, context = {}, []
    status = 0
    for name in names:
        # The compile rows in a process of their own: interleaved with the workload's rows, each
        # LLVM compile (about 1 s for the transformer block) left the next run with cold caches
        # (2026-11-25: transformer_block_512 fused 4.35-5.03 ms alone, 6.97-7.05 ms with them).
        for rows_filter in (f"^({name}/|stream/)", f"^compile/{name}/"):
            run = subprocess.run([binary, f"--benchmark_filter={rows_filter}"] + passthrough,
                                 capture_output=True, text=True)
            status = status or run.returncode
            if run.returncode:
                sys.stderr.write(run.stdout[-2000:] + run.stderr[-2000:])
            limit = re.search(r"^bandwidth limit: .*$", run.stdout, re.M)
            cpu = re.search(r"^CPU: .*$", run.stdout, re.M)
            if rows_filter.startswith("^("):
                context.append(f"{name}: {cpu.group(0) if cpu else '?'}; {limit.group(0) if limit else ''}")
            for header, rows in tables(run.stdout).items():
                if header not in joined:
                    joined[header] = rows[:1]
                joined[header] += [r for r in rows[1:] if r[0] == name]
        print(f"{name} done", file=sys.stderr, flush=True)
    return joined, context, status


def ratios(joined):
    """{workload: best peer / fuse} from the table of peers (the one with a "fuse ms" column)."""
    for header, rows in joined.items():
        if "fuse ms" in header and "best peer / fuse" in header:
            column = header.index("best peer / fuse")
            return {r[0]: r[column] for r in rows[1:]}
    return {}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default="build/bench/fuse_bench")
    parser.add_argument("--filter", default="", help="only workloads whose name matches this regex")
    parser.add_argument("--rounds", type=int, default=1, help="run every selected workload this many times, round by round")
    args, passthrough = parser.parse_known_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    names = [n for n in workloads(args.binary) if not args.filter or re.search(args.filter, n)]
    status, per_round = 0, []
    for round_index in range(args.rounds):
        joined, context, round_status = run_round(args.binary, names, passthrough)
        status = status or round_status
        if args.rounds > 1:
            if round_index:
                print()
            print(f"## round {round_index + 1} of {args.rounds}")
        print("\n".join(context))
        for header in joined:
            print()
            print(markdown(header, joined[header]))
        per_round.append(ratios(joined))
    if args.rounds > 1:
        header = ("workload",) + tuple(f"round {i + 1}" for i in range(args.rounds)) + ("median", "min")
        rows = [[":--"] + ["--:"] * (len(header) - 1)]
        for name in names:
            values = [r.get(name, "") for r in per_round]
            numbers = [float(v) for v in values if re.fullmatch(r"[0-9.]+", v)]
            rows.append([name] + values + ([f"{statistics.median(numbers):.2f}", f"{min(numbers):.2f}"] if numbers else ["", ""]))
        print()
        print("best peer / fuse in each round (>= 1: fuse wins):")
        print()
        print(markdown(header, rows))
    return status


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
