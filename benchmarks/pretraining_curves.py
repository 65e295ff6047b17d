"""The curves of pre-training runs in one picture, and a table of where they stand at given steps: when the masked LM
leaves the token-frequency table, and when the sentence-pair head learns (issue #86, "see the plateau").

An hour of BERT-Tiny's shape with next-sentence prediction sits on the token-frequency table for a while: its
validation nats beyond frequency (the table's cross-entropy at <mask> positions minus the model's, run_mlm.py's
MaskedLMTrainer) stay near 0, the model predicting each masked token from its frequency alone. Whether a run leaves
that plateau, and at which step, decides what a recipe is worth; one run's final figure says neither, a curve does.

Each --run NAME=FOLDER is a run_mlm.py --output_dir, finished or not, read from the TensorBoard logs it writes as it
goes. Runs given the same NAME are pre-training seeds of one arm: drawn in one colour, a thin line each, and the table
gives their mean ± sd (the sd with 2 runs or more). Panels: validation nats beyond frequency and pair accuracy (runs
of --objective nsp or sop), training masked-LM loss and pair loss, against optimizer steps.

    python benchmarks/pretraining_curves.py --run "NSP=screen/nsp-42" --run "NSP=screen/nsp-43" \\
        --run "pair loss 0.3=screen/w03-42" --at_steps 3600 7200 --output plateau.png
"""

import argparse
import os
import statistics

from common import print_table
from utils import UserError, non_negative_int

NO_PAIR_HEAD = "no run has a sentence-pair head\n(run_mlm.py --objective nsp or sop)"
# (part of the logs, tags in the order looked for, title, a line to compare with, what an empty panel says): a plain
# masked LM logs its loss as `loss`, which with a pair head is the weighted sum of both losses.
PANELS = [("eval", ["nats_beyond_frequency"], "Validation: nats beyond the token-frequency table",
           (0, "the token-frequency table"), None),  # main refuses a run without it.
          ("eval", ["pair_accuracy"], "Validation: sentence-pair accuracy",
           (0.5, "chance: half the pairs are changed"), NO_PAIR_HEAD),
          ("train", ["masked_lm_loss", "loss"], "Training: masked-LM loss", None, "no training round ended yet"),
          ("train", ["pair_loss"], "Training: sentence-pair loss", None, NO_PAIR_HEAD)]


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", action="append", required=True, metavar="NAME=FOLDER",
                        help="A run_mlm.py --output_dir and its arm's name; repeat, the same NAME for its seeds.")
    parser.add_argument("--at_steps", type=non_negative_int, nargs="+",
                        help="Optimizer steps of the table (default: each run's last evaluation).")
    parser.add_argument("--output", required=True, help="The picture, a .png file.")
    args = parser.parse_args()
    if unnamed := [run for run in args.run if "=" not in run]:
        parser.error(f"--run {unnamed[0]}: give it as NAME=FOLDER, NAME its arm's name.")
    args.runs = [run.split("=", 1) for run in args.run]
    return args


def read_logs(folder):
    """{part: {tag: {step: value}}} of a run's TensorBoard logs, for "train" and "eval"."""
    import tensorflow as tf  # Also what TensorBoard reads with: logs on gs:// are read as local ones.
    from tensorboard.backend.event_processing.event_accumulator import TENSORS, EventAccumulator

    logs = {}
    for part in ("train", "eval"):
        path = os.path.join(folder, "logs", part)
        if not tf.io.gfile.isdir(path):
            raise UserError(f"{folder} has no {path}: not a run_mlm.py output folder, or it has not evaluated yet.")
        events = EventAccumulator(path, size_guidance={TENSORS: 0})  # 0: every step, none sampled away.
        events.Reload()
        # In the order written: a resumed run evaluates its first step again, and that value replaces the first. By
        # the time written, not the order read: TensorBoard reads the event files in the order of their names, in
        # which a writer's counter 10 comes before 9.
        logs[part] = {tag: {event.step: float(tf.make_ndarray(event.tensor_proto))
                            for event in sorted(events.Tensors(tag), key=lambda event: event.wall_time)}
                      for tag in events.Tags()[TENSORS]}
    return logs


def curve(logs, part, tags):
    """{step: value} of the first of `tags` that the run logged, empty if none."""
    return next((logs[part][tag] for tag in tags if tag in logs[part]), {})


def mean_sd(values):
    """"mean ± sd" over runs ("mean" for one run; "–" for none), to 3 decimals."""
    if not values:
        return "–"
    return f"{statistics.mean(values):.3f}" + (f" ± {statistics.stdev(values):.3f}" if len(values) > 1 else "")


def draw(runs, output):
    """The 2×2 picture: a thin line per run, a colour per arm."""
    import matplotlib  # Only here: the table needs no plotting library.
    matplotlib.use("Agg")  # A file, no window: this runs on a TPU VM's shell as well.
    from matplotlib import pyplot

    figure, panels = pyplot.subplots(2, 2, figsize=(11, 8), sharex=True)
    colours = {name: f"C{i}" for i, name in enumerate(dict.fromkeys(name for name, _, _ in runs))}
    for axes, (part, tags, title, reference, absent) in zip(panels.flat, PANELS):
        labelled = set()
        for name, _, logs in runs:
            if points := sorted(curve(logs, part, tags).items()):
                axes.plot(*zip(*points), color=colours[name], linewidth=1, marker=".",
                          label=None if name in labelled else name)  # One legend entry per arm.
                labelled.add(name)
        if not labelled:
            axes.text(0.5, 0.5, absent, ha="center", va="center", transform=axes.transAxes)
        else:
            if reference:
                axes.axhline(reference[0], color="black", linestyle=":", label=reference[1])
            axes.legend(fontsize="small")
        axes.set_title(title)
        axes.grid(alpha=0.3)
    for axes in panels[1]:
        axes.set_xlabel("optimizer steps")
    figure.tight_layout()
    figure.savefig(output, dpi=120)


def main(args):
    if not args.output.endswith(".png"):
        raise UserError(f"--output {args.output}: name a .png file.")
    runs = [(name, folder, read_logs(folder)) for name, folder in args.runs]
    arms = {}  # {name: {step: ([nats beyond frequency], [pair accuracy])}}, over the arm's runs.
    for name, folder, logs in runs:
        if not logs["eval"]:
            raise UserError(f"{folder} has not evaluated yet: run_mlm.py evaluates at step 0, then every "
                            "--eval_every_steps.")
        beyond, pair_accuracy = curve(logs, "eval", ["nats_beyond_frequency"]), curve(logs, "eval", ["pair_accuracy"])
        if not beyond:
            raise UserError(f"{folder}'s evaluations have no nats_beyond_frequency: run_mlm.py measures it for a "
                            "masked LM trained on shards with their token counts (prepare_tfrecord_shards.py writes "
                            "them), not for --objective electra.")
        for step in args.at_steps or [max(beyond)]:
            if step not in beyond:
                raise UserError(f"run {name!r} ({folder}) has no evaluation at step {step}; it has steps "
                                f"{', '.join(map(str, sorted(beyond)))}.")
            at_step = arms.setdefault(name, {}).setdefault(step, ([], []))
            at_step[0].append(beyond[step])
            if step in pair_accuracy:
                at_step[1].append(pair_accuracy[step])
    print_table(["arm", "step", "runs", "nats beyond frequency (validation)", "pair accuracy (validation)"],
                [[name, step, len(beyond), mean_sd(beyond), mean_sd(pair_accuracy)]
                 for name, steps in arms.items() for step, (beyond, pair_accuracy) in sorted(steps.items())])
    draw(runs, args.output)
    print(f"picture: {args.output}")


if __name__ == "__main__":
    try:
        main(parse_args())
    except UserError as err:
        raise SystemExit(f"error: {err}")
