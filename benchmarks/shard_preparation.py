#!/usr/bin/env python
"""Benchmark of step 2: prepare_tfrecord_shards.py end to end, with 1 and more worker processes, against the
tokenizer alone, and the peak memory of each process.

Measured in one run, round after round, so that whatever else loads the machine disturbs every figure alike:

- raw tokenizer: 🤗 Tokenizers' `Tokenizer.encode_batch` (and `encode_batch_fast`, which skips character
  offsets) over the same non-empty lines, already in memory, in batches of --batch_size lines, on all cores;
- end to end: `prepare_tfrecord_shards.py --num_workers N` for each N of --num_workers, in a fresh process, from
  process start to its exit (after the manifest is written), on the corpus (1x), on the same text gzip-compressed
  (1x .gz, read as it is: its time against the text's is reported) and on the corpus repeated --scale times;
  tokens per second (every token tokenized, those dropped at the ends of parts included, as the tokenizer counts
  them), busy cores, tokens per CPU-second (what a core does, whatever else loads the machine), and the peak
  resident memory of the main process and of the largest worker process (sampled from /proc every 50 ms: VmHWM,
  each process's own high-water mark);
- with --baseline_script, another version of the script (say the previous commit's) the same way, one process.

With --cores N [N ...], only how it grows with cores, on the larger corpus: for each N, every process pinned to
the first N cores of this one's CPU affinity (as taskset does) with RAYON_NUM_THREADS=N, `encode_batch_fast`
alone (in a process of its own, the lines in memory) beside the script with its default --num_workers (one per
core it may use), and their ratio.

And where the time goes: each stage of the script timed alone, one after the other, in every round.

    python benchmarks/shard_preparation.py      # the slice of WikiText-2 train in tests/data: a quick check only
    # The README's figures: all of WikiText-2 train, a 10k tokenizer trained on it (see --help for the file).
    python benchmarks/shard_preparation.py --train_file ../shared/data/wikitext-2-v1/train.txt
    # On a machine with many cores: enough text for every worker (WikiText-2 x 32, 330 MiB).
    python benchmarks/shard_preparation.py --train_file ../shared/data/wikitext-2-v1/train.txt --scale 32 \
        --num_workers 1 2 4 8 16
    # How it grows with cores: the table of --cores alone, on the x32 corpus.
    python benchmarks/shard_preparation.py --train_file ../shared/data/wikitext-2-v1/train.txt --scale 32 \
        --cores 2 4 8 16
    # Against the version before this benchmark (TensorFlow, 🤗 Datasets, tf.train.Example per sample):
    mkdir -p /tmp/old && for f in prepare_tfrecord_shards.py utils.py; do git show ae96b08:$f > /tmp/old/$f; done
    python benchmarks/shard_preparation.py --train_file ../shared/data/wikitext-2-v1/train.txt \
        --baseline_script /tmp/old/prepare_tfrecord_shards.py
"""

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from common import (DEFAULT_TRAIN_FILE, REPO, TRAIN_FILE_HELP, describe_machine, load_average, median, print_table,
                    train_tokenizer)

import shards  # noqa: E402  (common puts the repository on the path)
from corpus import iter_text_file_batches  # noqa: E402
from models import load_backend_tokenizer  # noqa: E402
from prepare_tfrecord_shards import available_cores  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train_file", default=str(DEFAULT_TRAIN_FILE), help=TRAIN_FILE_HELP)
    parser.add_argument("--tokenizer", help="Tokenizer folder (default: train one of 10,000 tokens on the corpus "
                                            "with train_unigram.py, before measuring).")
    parser.add_argument("--max_length", type=int, default=128, help="Tokens per sample (default: %(default)s).")
    parser.add_argument("--batch_size", type=int, default=1000,
                        help="Lines per tokenizer call, for the script and the raw tokenizer (default: %(default)s).")
    parser.add_argument("--scale", type=int, default=4,
                        help="The larger corpus is the corpus repeated this many times (default: %(default)s).")
    parser.add_argument("--rounds", type=int, default=3, help="Rounds of measurements (default: %(default)s).")
    parser.add_argument("--num_workers", type=int, nargs="+", default=sorted({1, available_cores()}),
                        help="Worker counts to run the script with, each passed as its --num_workers (default: 1 "
                             "and the number of cores, %(default)s).")
    parser.add_argument("--baseline_script", help="Another version of prepare_tfrecord_shards.py to measure too.")
    parser.add_argument("--cores", type=int, nargs="+",
                        help="Measure only how the script grows with cores: pinned to each of these numbers of "
                             "cores in turn (at most the cores this process may use).")
    parser.add_argument("--encode_batch_fast_only", action="store_true", help=argparse.SUPPRESS)  # See pinned().
    args = parser.parse_args()
    if args.cores and max(args.cores) > available_cores():
        parser.error(f"--cores {max(args.cores)}: this process may use {available_cores()} cores")
    return args


def raw_tokenizer_speed(tokenizer, batches, method):
    """Tokens per second and average busy cores of `tokenizer.method` over batches of lines held in memory."""
    encode = getattr(tokenizer, method)
    start, cpu_start = time.perf_counter(), time.process_time()
    num_tokens = sum(len(encoding) for batch in batches for encoding in encode(batch))
    seconds = time.perf_counter() - start
    return num_tokens / seconds, (time.process_time() - cpu_start) / seconds


def pinned(cores):
    """Keyword arguments of subprocess.Popen for a process (and the processes it starts) that runs on the first
    `cores` cores of this process's CPU affinity only, with as many tokenizer threads; {} for no limit."""
    if not cores:
        return {}
    cpus = sorted(os.sched_getaffinity(0))[:cores]
    return {"preexec_fn": lambda: os.sched_setaffinity(0, cpus), "env": {**os.environ, "RAYON_NUM_THREADS": str(cores)}}


def pinned_encode_batch_fast_speed(corpus, tokenizer, args, cores):
    """raw_tokenizer_speed of encode_batch_fast on `cores` cores: in a fresh process, since 🤗 Tokenizers sizes its
    thread pool once per process."""
    command = [sys.executable, __file__, "--encode_batch_fast_only", "--train_file", corpus, "--tokenizer",
               tokenizer, "--batch_size", str(args.batch_size)]
    child = subprocess.run(command, capture_output=True, text=True, check=True, **pinned(cores))
    return float(child.stdout.split()[-1])


def run_script(script, corpus, tokenizer, output_dir, args, num_workers=None, cores=None):
    """Runs a version of prepare_tfrecord_shards.py in a fresh process, from start to exit (on `cores` cores only,
    if given: see pinned).

    Returns tokens per second (every token tokenized), average busy cores (the workers' included), and the peak
    resident memory in MiB of the main process and of the largest worker process (None without workers).
    """
    command = [sys.executable, script, "--tokenizer_name_or_path", tokenizer, "--train_file", corpus,
               "--max_length", str(args.max_length), "--batch_size", str(args.batch_size),
               "--output_dir", output_dir, "--overwrite"]
    if num_workers is not None:
        command += ["--num_workers", str(num_workers)]
    with tempfile.TemporaryFile() as log:
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=log, stderr=log, **pinned(cores))
        peaks = {}
        sampler = threading.Thread(target=sample_peak_memory, args=(process, peaks), daemon=True)
        sampler.start()
        # The CPU time of the process and of the workers it waited for.
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        sampler.join()
        if process.returncode:
            log.seek(0)
            raise SystemExit(f"{' '.join(command)} failed:\n{log.read().decode()[-3000:]}")
    with open(os.path.join(output_dir, "train", "manifest.json")) as f:
        manifest = json.load(f)
    num_tokens = manifest["num_tokens"] + manifest["dropped_tokens"]
    workers = [peak for pid, (peak, is_worker) in peaks.items() if is_worker]
    return (num_tokens / seconds, (usage.ru_utime + usage.ru_stime) / seconds, peaks[process.pid][0],
            max(workers) if workers else None)


def sample_peak_memory(process, peaks):
    """Until `process` ends, fills `peaks` with {pid: (peak resident MiB, whether it is a worker)} for it and each
    process it started, read from /proc every 50 ms. VmHWM is each process's own high-water mark, so a sample taken
    after the peak still sees it. Workers are the processes started by multiprocessing's spawn (not its resource
    tracker)."""
    while process.returncode is None:
        pids, found = [process.pid], []
        while pids:  # The process and its descendants.
            pid = pids.pop()
            try:
                with open(f"/proc/{pid}/status") as f:
                    peak = next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    is_worker = b"spawn_main" in f.read()
                with open(f"/proc/{pid}/task/{pid}/children") as f:
                    pids += [int(child) for child in f.read().split()]
            except (OSError, StopIteration):  # It ended, or is a zombie already (no VmHWM).
                continue
            found.append((pid, peak, is_worker))
        for pid, peak, is_worker in found:
            peaks[pid] = (max(peak, peaks.get(pid, (0,))[0]), is_worker)
        time.sleep(0.05)


def time_stages(corpus, tokenizer_dir, args, output_file):
    """Seconds of each stage of the script, run alone and one after the other, in this process."""
    stages = {}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import prepare_tfrecord_shards"], cwd=REPO, check=True)
    stages["process start and imports"] = time.perf_counter() - start

    start = time.perf_counter()
    tokenizer, _ = load_backend_tokenizer(tokenizer_dir)
    stages["load the tokenizer"] = time.perf_counter() - start

    start = time.perf_counter()
    batches = list(iter_text_file_batches([corpus], args.batch_size))
    stages["read the text"] = time.perf_counter() - start

    start = time.perf_counter()
    tokens = [shards.tokenize(tokenizer, batch) for batch in batches]
    stages["tokenize (encode_batch_fast, ids to numpy)"] = time.perf_counter() - start

    start = time.perf_counter()
    stream = np.concatenate(tokens)
    num_samples = len(stream) // args.max_length
    samples = stream[:num_samples * args.max_length].reshape(num_samples, args.max_length)
    serialize = shards.RecordSerializer(args.max_length)
    records = [serialize(samples[i:i + shards.ShardWriter.CHUNK_SIZE])
               for i in range(0, num_samples, shards.ShardWriter.CHUNK_SIZE)]
    stages["cut and serialize"] = time.perf_counter() - start

    start = time.perf_counter()
    with open(output_file, "wb") as f:
        for chunk in records:
            f.write(chunk)
    stages["write"] = time.perf_counter() - start
    return stages


def measure_cores(args, tokenizer_dir, larger, scratch):
    """The --cores table: encode_batch_fast alone and the script end to end, pinned to each number of cores."""
    speeds = {}  # (cores, "raw" or "script") -> tokens/s, one per round.
    peaks = {}  # cores -> peak resident MiB of the largest process, one per round.
    for round_number in range(args.rounds):
        for cores in args.cores:
            speeds.setdefault((cores, "raw"), []).append(
                pinned_encode_batch_fast_speed(larger, tokenizer_dir, args, cores))
            speed, _, main_peak, worker_peak = run_script(str(REPO / "prepare_tfrecord_shards.py"), larger,
                                                          tokenizer_dir, os.path.join(scratch, "out"), args,
                                                          cores=cores)
            speeds.setdefault((cores, "script"), []).append(speed)
            peaks.setdefault(cores, []).append(max(main_peak, worker_peak or 0))
        print(f"round {round_number + 1} of {args.rounds} done", file=sys.stderr)
    print_table(["cores", "encode_batch_fast alone (tokens/s)", "prepare_tfrecord_shards.py (tokens/s)", "ratio",
                 "peak RSS of a process (MiB)"],
                [[cores, f"{median(speeds[cores, 'raw']):,.0f}", f"{median(speeds[cores, 'script']):,.0f}",
                  f"{median([s / r for s, r in zip(speeds[cores, 'script'], speeds[cores, 'raw'])]):.2f}",
                  f"{median(peaks[cores]):.0f}"] for cores in args.cores])


def main():
    args = parse_args()
    if args.encode_batch_fast_only:  # The child of pinned_encode_batch_fast_speed.
        tokenizer, _ = load_backend_tokenizer(args.tokenizer)
        batches = list(iter_text_file_batches([args.train_file], args.batch_size))
        print(raw_tokenizer_speed(tokenizer, batches, "encode_batch_fast")[0])
        return
    with tempfile.TemporaryDirectory(prefix="shard-benchmark-") as scratch:
        tokenizer_dir = args.tokenizer
        if not tokenizer_dir:
            tokenizer_dir = os.path.join(scratch, "tokenizer")
            train_tokenizer(args.train_file, tokenizer_dir)
        larger = os.path.join(scratch, f"train-x{args.scale}.txt")
        with open(args.train_file, "rb") as f:
            text = f.read()
        with open(larger, "wb") as f:
            f.write(text * args.scale)
        compressed = os.path.join(scratch, "train.txt.gz")
        with gzip.open(compressed, "wb") as f:
            f.write(text)

        if args.cores:
            load_before = load_average()
            print(f"Machine: {describe_machine()}; corpus {args.train_file} x{args.scale} "
                  f"({args.scale * len(text) / 2**20:.0f} MiB); tokenizer: {tokenizer_dir}; median of "
                  f"{args.rounds} rounds\n")
            measure_cores(args, tokenizer_dir, larger, scratch)
            print(f"\nLoad average before and after: {load_before:.1f}, {load_average():.1f}")
            return
        tokenizer, _ = load_backend_tokenizer(tokenizer_dir)
        batches = list(iter_text_file_batches([args.train_file], args.batch_size))
        scripts = {f"prepare_tfrecord_shards.py --num_workers {count}": (str(REPO / "prepare_tfrecord_shards.py"),
                                                                       count) for count in args.num_workers}
        if args.baseline_script:
            scripts["baseline"] = (args.baseline_script, None)

        # Row name -> one (tokens/s, busy cores, peak MiB of the main process, of the largest worker) per round.
        results = {}
        stages = {}  # Stage -> seconds, one per round.
        loads = [load_average()]
        for round_number in range(args.rounds):
            for method in ("encode_batch", "encode_batch_fast"):
                results.setdefault(f"raw tokenizer, {method}", []).append(
                    (*raw_tokenizer_speed(tokenizer, batches, method), None, None))
            for name, (script, num_workers) in scripts.items():
                for label, corpus in (("1x", args.train_file), ("1x .gz", compressed), (f"{args.scale}x", larger)):
                    results.setdefault(f"{name}, {label}", []).append(
                        run_script(script, corpus, tokenizer_dir, os.path.join(scratch, "out"), args, num_workers))
            for stage, seconds in time_stages(args.train_file, tokenizer_dir, args,
                                              os.path.join(scratch, "records")).items():
                stages.setdefault(stage, []).append(seconds)
            loads.append(load_average())
            print(f"round {round_number + 1} of {args.rounds} done", file=sys.stderr)

    raw = results["raw tokenizer, encode_batch"]
    raw_fast = results["raw tokenizer, encode_batch_fast"]
    print(f"Machine: {describe_machine()}; load average during the run {min(loads):.1f} to {max(loads):.1f}")
    print(f"Corpus: {args.train_file} ({len(text) / 2**20:.1f} MiB; {sum(map(len, batches))} non-empty lines), "
          f"x{args.scale} for the larger one; tokenizer: {tokenizer_dir}; --max_length {args.max_length}, "
          f"--batch_size {args.batch_size}; median of {args.rounds} rounds\n")
    rows = []
    for name, figures in results.items():
        speeds = [speed for speed, _, _, _ in figures]
        peaks = [[figure[column] for figure in figures if figure[column] is not None] for column in (2, 3)]
        rows.append([name, f"{median(speeds):,.0f}", f"{min(speeds):,.0f} to {max(speeds):,.0f}",
                     f"{median([cores for _, cores, _, _ in figures]):.2f}",
                     f"{median([speed / cores for speed, cores, _, _ in figures]):,.0f}",
                     f"{median([s / r[0] for s, r in zip(speeds, raw)]):.2f}",
                     f"{median([s / r[0] for s, r in zip(speeds, raw_fast)]):.2f}",
                     *(f"{median(peak):.0f}" if peak else "" for peak in peaks)])
    print_table(["run", "tokens/s", "range", "busy cores", "tokens per CPU-second", "x encode_batch",
                 "x encode_batch_fast",
                 "peak RSS main (MiB)", "peak RSS largest worker (MiB)"], rows)

    for name in scripts:
        # Speeds over the same tokens: their ratio is the ratio of the times, taken in each round.
        slowdown = median([text_run[0] / gz_run[0]
                           for text_run, gz_run in zip(results[f"{name}, 1x"], results[f"{name}, 1x .gz"])])
        print(f"{name}: the .gz corpus takes {slowdown:.3f} times as long as its text")
        for column, process in ((2, "main process"), (3, "largest worker")):
            small, big = ([figure[column] for figure in results[f"{name}, {label}"] if figure[column] is not None]
                          for label in ("1x", f"{args.scale}x"))
            if small and big:
                print(f"{name}: peak RSS of the {process} at {args.scale}x / at 1x = "
                      f"{median(big) / median(small):.2f}")
    print("\nWhere the time goes (each stage alone, one after the other, 1x corpus):\n")
    stages = {stage: median(seconds) for stage, seconds in stages.items()}
    total = sum(stages.values())
    print_table(["stage", "seconds", "share"],
                [[stage, f"{seconds:.2f}", f"{seconds / total:.0%}"] for stage, seconds in stages.items()]
                + [["sum", f"{total:.2f}", ""]])


if __name__ == "__main__":
    main()
