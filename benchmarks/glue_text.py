#!/usr/bin/env python
"""The training texts of GLUE's five tasks that benchmarks/glue.py scores (CoLA, SST-2, MRPC, STS-B, RTE), one per
line and without their labels: the task-adaptive part of a pre-training corpus (`make glue-hour`, issue #49). A
pair's two texts are two lines, one after the other. Only the training files are read: the dev sets are what the
benchmark scores, and a model that has read them would be scored on text it has seen.

    python benchmarks/glue_text.py --glue_dir glue_data --output_file texts/glue-train.txt
"""

import argparse
import dataclasses
import os

from common import REPO  # noqa: F401 (puts the repository's modules on the path)
from glue import TASKS, read_splits
import tasks
from utils import UserError, refuse_an_output_that_is_read


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--glue_dir", required=True, help="A folder of GLUE's task folders (CoLA, SST-2, ...).")
    parser.add_argument("--output_file", required=True, help="The text file to write (replaced if there).")
    return parser.parse_args()


def training_texts(glue_dir):
    """{task: its training texts, in the file's order}, read as run_classification.py --task_name reads them: the
    task's own definition, its training file alone."""
    texts = {}
    for task_name, (folder, _, _) in TASKS.items():
        train_only = dataclasses.replace(tasks.GLUE_TASKS[task_name], files=(("train", "train.tsv"),), test_files=())
        train = read_splits(os.path.join(glue_dir, folder), task_name, train_only)["train"]
        rows = zip(train.texts, train.text_pairs) if train.text_pairs else zip(train.texts)
        texts[task_name] = [line for row in rows for text in row if (line := text.strip())]
    return texts


def main(args):
    refuse_an_output_that_is_read(args.output_file, [args.glue_dir], "--output_file")
    texts = training_texts(args.glue_dir)
    with open(args.output_file, "w", encoding="utf-8") as f:
        for task_texts in texts.values():
            f.writelines(text + "\n" for text in task_texts)
    print(", ".join(f"{TASKS[task][0]}: {len(lines):,} lines" for task, lines in texts.items()),
          f"of training text written to {args.output_file}")


if __name__ == "__main__":
    try:
        main(parse_args())
    except UserError as err:
        raise SystemExit(f"error: {err}")
