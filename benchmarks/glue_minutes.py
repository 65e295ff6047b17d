"""GLUE's average against the minutes of pre-training, a line per recipe: benchmarks/glue.py's kept runs drawn as a
picture, with counting words (glue.py's lexical baseline) and random weights as horizontal lines.

Each --point RECIPE MINUTES MODEL is a model of glue.py's table (the NAME of its --model NAME=FOLDER) fine-tuned in
--runs_dir (glue.py's --output_dir), pre-trained with RECIPE for MINUTES; the points of one recipe make its line.
Random weights are glue.py's own arm in that folder. A point's average is glue.py's: on each task the mean dev score
over the seeds at the learning rate where that mean is best, then the mean of the five tasks; its error bar, the
standard deviation over the fine-tuning seeds of that average. Models given the same RECIPE and MINUTES are
pre-training seeds of one point: it is drawn at their mean, its error bar the standard deviation between them. Every
run of --learning_rates x --seeds must be there: a point missing some is refused, not drawn from fewer. The figures
are printed as a table beside the picture.

    python benchmarks/glue_minutes.py --glue_dir ../shared/data/glue --runs_dir glue-corpus \
        --point "NSP" 10 "NSP 10 min" --point "NSP" 60 "NSP hour" --point "masked LM" 60 "MLM hour" \
        --output glue-minutes.png
"""

import argparse
import os
import statistics

from glue import FROM_SCRATCH, TASKS, best_learning_rate, is_kept, lexical_baseline, read_kept_run, run_folder
from common import print_table
from utils import UserError, positive_float


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--glue_dir", required=True, help="GLUE's task folders, for the lexical baseline.")
    parser.add_argument("--runs_dir", required=True, help="benchmarks/glue.py's --output_dir, with its kept runs.")
    parser.add_argument("--point", nargs=3, action="append", required=True, metavar=("RECIPE", "MINUTES", "MODEL"),
                        help="A model of glue.py's table and the recipe and minutes of its pre-training; repeat.")
    parser.add_argument("--learning_rates", type=positive_float, nargs="+", default=[1e-3],
                        help="glue.py's grid (default: %(default)s)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="(default: %(default)s)")
    parser.add_argument("--output", required=True, help="The picture, a .png file.")
    args = parser.parse_args()
    try:
        args.point = [(recipe, positive_float(minutes), model) for recipe, minutes, model in args.point]
    except argparse.ArgumentTypeError as err:
        parser.error(f"--point: the minutes, {err}")
    return args


def glue_average(args, model):
    """(GLUE's average, its standard deviation over the seeds, {task: score}) of `model`'s runs in --runs_dir."""
    scores, by_seed = {}, []
    for task_name in TASKS:
        by_rate, missing = {}, []
        for learning_rate in args.learning_rates:
            for seed in args.seeds:
                folder = run_folder(args.runs_dir, model, task_name, learning_rate, seed)
                if is_kept(folder):
                    by_rate.setdefault(learning_rate, []).append(read_kept_run(folder)["validation"]["score"])
                else:
                    missing.append(folder)
        if missing:
            flags = "the --model of that architecture (without --no_random_weights)" if model == FROM_SCRATCH \
                else "--model"
            raise UserError(f"{model!r} lacks {len(missing)} run(s) in {args.runs_dir}, such as {missing[0]}: run "
                            f"benchmarks/glue.py with this --output_dir, {flags} and grid first.")
        runs = by_rate[best_learning_rate(by_rate)]
        scores[task_name] = statistics.mean(runs)
        by_seed.append(runs)
    seed_averages = [statistics.mean(task_runs[i] for task_runs in by_seed) for i in range(len(args.seeds))]
    spread = statistics.stdev(seed_averages) if len(seed_averages) > 1 else 0.0
    return statistics.mean(scores.values()), spread, scores


def one_point(runs):
    """A point's (average, error bar) from its models' (average, sd over fine-tuning seeds): one model's own, or for
    several pre-training seeds their mean and the standard deviation between them."""
    if len(runs) == 1:
        return runs[0]
    averages = [average for average, _ in runs]
    return statistics.mean(averages), statistics.stdev(averages)


def draw(args, curves, random_weights, lexical):
    """The picture: a line per recipe, minutes on a log scale (10, 30, 60, 120 are even steps of it)."""
    import matplotlib  # Only here: the figures above need no plotting library.
    matplotlib.use("Agg")  # A file, no window: this runs on a TPU VM's shell as well.
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(7, 4.5))
    for recipe, points in curves.items():
        minutes, averages, spreads = zip(*sorted((minutes, average, spread)
                                                 for minutes, (average, spread) in points.items()))
        axes.errorbar(minutes, averages, yerr=spreads, marker="o", capsize=3, label=recipe)
    axes.axhline(lexical, color="black", linestyle="--", label=f"counting words (TF-IDF, overlap): {lexical:.1f}")
    axes.axhline(random_weights, color="gray", linestyle=":", label=f"random weights: {random_weights:.1f}")
    all_minutes = sorted({minutes for points in curves.values() for minutes in points})
    axes.set_xscale("log")
    axes.set_xticks(all_minutes, [f"{minutes:g}" for minutes in all_minutes])
    axes.minorticks_off()
    axes.set_xlabel("minutes of pre-training (2 CPU cores)")
    axes.set_ylabel("GLUE average, 5 dev sets (× 100)")
    axes.legend(fontsize="small")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(args.output, dpi=120)


def main(args):
    if not args.output.endswith(".png"):
        raise UserError(f"--output {args.output}: name a .png file.")
    runs_by_point, rows = {}, []
    for recipe, minutes, model in args.point:
        average, spread, scores = glue_average(args, model)
        runs_by_point.setdefault(recipe, {}).setdefault(minutes, []).append((100 * average, 100 * spread))
        rows.append([recipe, f"{minutes:g}", model, *(f"{100 * scores[task]:.1f}" for task in TASKS),
                     f"{100 * average:.1f} ± {100 * spread:.1f}"])
    random_weights = 100 * glue_average(args, FROM_SCRATCH)[0]
    lexical = 100 * statistics.mean(lexical_baseline(os.path.join(args.glue_dir, TASKS[task_name][0]),
                                                     task_name)["score"] for task_name in TASKS)
    print_table(["recipe", "minutes", "model", *(TASKS[task][0] for task in TASKS), "average ± sd over seeds"], rows)
    curves = {}
    for recipe, points in runs_by_point.items():
        for minutes, runs in points.items():
            average, spread = curves.setdefault(recipe, {})[minutes] = one_point(runs)
            if len(runs) > 1:
                print(f"{recipe}, {minutes:g} minutes: {average:.1f} ± {spread:.1f} over {len(runs)} pre-training "
                      "seeds")
    print(f"random weights {random_weights:.1f}; counting words {lexical:.1f}")
    draw(args, curves, random_weights, lexical)
    print(f"picture: {args.output}")


if __name__ == "__main__":
    try:
        main(parse_args())
    except UserError as err:
        raise SystemExit(f"error: {err}")
