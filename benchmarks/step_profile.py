#!/usr/bin/env python
"""Where run_mlm.py's training step spends its time: TensorFlow's profiler over steps --start to --stop of a run (the
flags after `--`, as run_mlm.py takes them), then the time of each op on TensorFlow's compute threads, by what the op
is for: the matmuls (the LM head's apart), the LM head's softmax cross-entropy and the rest of it, the accuracy's
argmax, the optimizer update, the gathers, and the rest; and how long the step waited for its input. MFU counts the
model's FLOPs (devices.training_flops_per_token): the other shares are where a step's time goes beyond them.

    python benchmarks/step_profile.py --start 60 --stop 110 -- --train_dataset tfrecords/train \\
        --tokenizer unigram-tokenizer --pretrained_model_config configs/bert-base.json --objective nsp \\
        --max_length 128 --per_replica_batch_size 32 --max_steps 120 --output_dir profiled-run --overwrite
"""

import argparse
import collections
import functools
import glob
import os
import re
import sys
import tempfile

from common import describe_machine, load_average

import tensorflow as tf  # noqa: E402  (after common, which quiets TensorFlow)
import tf_keras as keras  # noqa: E402
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402

import run_mlm  # noqa: E402

# The name scopes of the LM heads of 🤗's TF models: BERT's and ELECTRA's "predictions", RoBERTa's "lm_head".
LM_HEAD_SCOPES = {"predictions", "generator_predictions", "lm_head"}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--start", type=int, default=60, help="First step profiled, after tracing and warm-up "
                                                                "(default: %(default)s).")
    parser.add_argument("--stop", type=int, default=110, help="Step the profile stops before (default: %(default)s).")
    parser.add_argument("run_mlm_args", nargs=argparse.REMAINDER, help="-- then run_mlm.py's flags.")
    args = parser.parse_args()
    args.run_mlm_args = [arg for arg in args.run_mlm_args if arg != "--"]
    return args


class Profile(keras.callbacks.Callback):
    """TensorFlow's profiler from the first fit call's batch `start` to before `stop`, into `log_dir`."""

    def __init__(self, start, stop, log_dir):
        super().__init__()
        self.start, self.stop, self.log_dir, self.done = start, stop, log_dir, False

    def on_train_batch_begin(self, batch, logs=None):
        if batch == self.start and not self.done:
            tf.profiler.experimental.start(self.log_dir)

    def on_train_batch_end(self, batch, logs=None):
        if batch == self.stop - 1 and not self.done:
            tf.profiler.experimental.stop()
            self.done = True


def category(scope, kind):
    in_lm_head = bool(LM_HEAD_SCOPES & set(scope.split("/")))
    if scope.startswith("AdamWeightDecay/") or kind.startswith("ResourceApplyAdam"):
        return "optimizer update (AdamW)"
    if "MatMul" in kind or "Einsum" in kind:
        return "matmuls, LM head" if in_lm_head else "matmuls, the rest (encoder, pair head)"
    if "SoftmaxCrossEntropy" in kind or "SoftmaxCrossEntropy" in scope:
        return "LM head: softmax cross-entropy"
    if in_lm_head:
        return "LM head: bias, activation, layer norm"
    if kind == "ArgMax":
        return "accuracy (argmax)"
    if "Gather" in kind or "Scatter" in kind or kind == "UnsortedSegmentSum":
        return "gathers (the head's positions, embeddings) and their gradients"
    return "the rest (layer norms, softmax, GELU, transposes, gradient sums)"


def breakdown(log_dir):
    """(steps, seconds per step, seconds waiting for input, {category: op seconds}) of the profile in `log_dir`."""
    space = xplane_pb2.XSpace()
    with open(glob.glob(os.path.join(log_dir, "plugins", "profile", "*", "*.xplane.pb"))[0], "rb") as f:
        space.ParseFromString(f.read())
    plane = next(plane for plane in space.planes if plane.name == "/host:CPU")
    seconds, steps, waiting = collections.Counter(), 0, 0.0
    step_seconds = 0.0
    for line in plane.lines:
        for event in line.events:
            name = plane.event_metadata[event.metadata_id].name
            if name == "train_function":
                steps, step_seconds = steps + 1, step_seconds + event.duration_ps / 1e12
            elif name == "IteratorGetNextOp::DoCompute":
                waiting += event.duration_ps / 1e12
            elif line.name.startswith("tf_Compute") and (op := re.fullmatch(r"([^:\s]+):(\w+)", name)):
                seconds[category(*op.groups())] += event.duration_ps / 1e12
    return steps, step_seconds / max(steps, 1), waiting, seconds


def main():
    args = parse_args()
    log_dir = tempfile.mkdtemp(prefix="step-profile-")
    profile = Profile(args.start, args.stop, log_dir)
    # run_mlm.py takes no profiling flag (a diagnosis, kept off a run's path): its fit calls get the callback here.
    fit = keras.Model.fit

    @functools.wraps(fit)
    def fit_with_profile(self, *fit_args, callbacks=None, **kwargs):
        return fit(self, *fit_args, callbacks=[*(callbacks or []), profile], **kwargs)

    keras.Model.fit = fit_with_profile
    sys.argv = ["run_mlm.py", *args.run_mlm_args]
    run_mlm.main(run_mlm.parse_args())
    if not profile.done:
        sys.exit(f"error: the run ended before step {args.stop}: give it more steps (--max_steps), or a smaller --stop.")
    steps, step_seconds, waiting, seconds = breakdown(log_dir)
    total = sum(seconds.values())
    print(f"\n{describe_machine()}, TensorFlow {tf.__version__}, load {load_average():.1f}")
    print(f"{steps} steps profiled, {step_seconds * 1000:.0f} ms each; waiting for input {waiting:.3f} s in all; "
          f"op time on the compute threads {total:.2f} s:\n")
    print("| share of op time | seconds | what the ops are for |\n|---:|---:|---|")
    for name, value in seconds.most_common():
        print(f"| {100 * value / total:.1f} % | {value:.2f} | {name} |")


if __name__ == "__main__":
    main()
