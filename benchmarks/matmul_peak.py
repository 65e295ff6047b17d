#!/usr/bin/env python
"""The FLOP/s this machine's CPU reaches in TensorFlow's float32 matrix multiplication, beside the paper peak that
run_mlm.py measures a CPU run's MFU against (devices.cpu_peak_flops: cores x FLOPs per cycle x clock): a check on
that peak. On an idle machine the best call comes near it; above it, the peak is wrong.

Square matrices of --size, multiplied --repeats times per call inside TensorFlow (no Python per product), on all
cores, after a first call that traces and warms up; 2 x size^3 FLOPs per product. Prints the best and the median of
--calls calls and their share of the paper peak, with the load average: above the number of cores, other jobs took
some of them, and the figures fall short. So it also prints the FLOPs per CPU-second of this process, against one
core's paper peak: what a core delivers while it runs, whatever else loads the machine (waiting threads that spin
count as running: it errs low). Above 100 %, the cores run faster than the clock the peak counts (a boost clock).

    python benchmarks/matmul_peak.py
"""

import argparse
import time

from common import describe_machine, load_average, median

import tensorflow as tf  # noqa: E402  (after common, which quiets TensorFlow)

from devices import cpu_peak_flops, intra_op_threads  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=2048, help="Rows and columns (default: %(default)s).")
    parser.add_argument("--repeats", type=int, default=10, help="Products per call (default: %(default)s).")
    parser.add_argument("--calls", type=int, default=10, help="Calls timed (default: %(default)s).")
    return parser.parse_args()


@tf.function
def products(a, b, repeats):
    total = tf.zeros_like(a)
    for _ in tf.range(repeats):
        total += tf.linalg.matmul(a, b)  # Each product depends on nothing earlier: none is skipped.
    return total


def main():
    args = parse_args()
    a, b = (tf.random.stateless_uniform([args.size, args.size], [0, seed]) for seed in (1, 2))
    products(a, b, tf.constant(args.repeats)).numpy()  # Traces, warms up.
    flops, flops_per_cpu_second = [], []
    loads = [load_average()]
    for _ in range(args.calls):
        start, start_cpu = time.perf_counter(), time.process_time()
        products(a, b, tf.constant(args.repeats)).numpy()
        flops.append(2 * args.size**3 * args.repeats / (time.perf_counter() - start))
        flops_per_cpu_second.append(2 * args.size**3 * args.repeats / (time.process_time() - start_cpu))
        loads.append(load_average())
    print(f"Machine: {describe_machine()}; TensorFlow {tf.__version__}; load average {min(loads):.1f} to "
          f"{max(loads):.1f}")
    print(f"float32 matmul {args.size}x{args.size}: best {max(flops) / 1e9:.1f} GFLOP/s, median "
          f"{median(flops) / 1e9:.1f} GFLOP/s over {args.calls} calls of {args.repeats} products; per CPU-second, "
          f"best {max(flops_per_cpu_second) / 1e9:.1f} GFLOP/s")
    peak, what = cpu_peak_flops(bfloat16=False, threads=intra_op_threads())
    if peak is None:
        print(f"no paper peak is known for {what}")
        return
    core_peak = cpu_peak_flops(bfloat16=False, threads=1)[0]
    print(f"paper peak {peak / 1e9:.1f} GFLOP/s ({what}): best {100 * max(flops) / peak:.0f} %, median "
          f"{100 * median(flops) / peak:.0f} %; per CPU-second, best {100 * max(flops_per_cpu_second) / core_peak:.0f} "
          f"% of one core's {core_peak / 1e9:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
