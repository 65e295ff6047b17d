#!/usr/bin/env python
"""The FLOP/s this machine's CPU reaches in TensorFlow's float32 matrix multiplication: the peak to measure a CPU
run's model FLOPs utilisation against, where no vendor publishes one (run_mlm.py shows MFU only for TPUs and the
GPUs it knows).

Square matrices of --size, multiplied --repeats times per call inside TensorFlow (no Python per product), on all
cores, after a first call that traces and warms up; 2 x size^3 FLOPs per product. Prints the best and the median of
--calls calls: the best is the peak, on a machine that other jobs share now and then.

    python benchmarks/matmul_peak.py
"""

import argparse
import sys
import time

from common import describe_machine, load_average, median

import tensorflow as tf  # noqa: E402  (after common, which quiets TensorFlow)


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
    flops = []
    loads = [load_average()]
    for _ in range(args.calls):
        start = time.perf_counter()
        products(a, b, tf.constant(args.repeats)).numpy()
        flops.append(2 * args.size**3 * args.repeats / (time.perf_counter() - start))
        loads.append(load_average())
    print(f"Machine: {describe_machine()}; TensorFlow {tf.__version__}; load average {min(loads):.1f} to "
          f"{max(loads):.1f}", file=sys.stderr)
    print(f"float32 matmul {args.size}x{args.size}: best {max(flops) / 1e9:.1f} GFLOP/s, median "
          f"{median(flops) / 1e9:.1f} GFLOP/s over {args.calls} calls of {args.repeats} products")


if __name__ == "__main__":
    main()
