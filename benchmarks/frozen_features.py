#!/usr/bin/env python
"""What a pre-trained encoder's features hold before any fine-tuning, read at two places: the output at <s>, which
the classification head of 🤗's …ForSequenceClassification reads, and the mean of the outputs over the tokens.
Two of GLUE's dev sets ask two questions:

- SST-2: a logistic regression on the frozen features of --sst2_train_examples training sentences (benchmarks/
  glue.py's draw), its accuracy on dev: how much sentiment the features make readable by a linear head;
- STS-B: the cosine of the two sentences' features, with no training at all, and its Spearman correlation with the
  gold scores: how close the features of two sentences are when their meanings are (words in common count).

Beside them, how much of the last layer's attention from <s> stays on <s> itself (mean over heads and SST-2's dev
sentences): where it is high, the output at <s> is mostly <s>'s own vector, not a summary of the sentence. Each
model beside the same architecture from random weights (the first model's, seed 0). Issue #49: fine-tuned on GLUE,
the models did not follow their masked-LM progress; this shows what the pre-training put where.

    python benchmarks/frozen_features.py --glue_dir glue_data --model "hour=glue-hour/model"
"""

import argparse
import os
import tempfile

import numpy as np
from scipy.stats import spearmanr
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from common import describe_machine, print_table
from glue import FROM_SCRATCH, TASKS, read_splits, sst2_subset
from utils import UserError

BATCH_SIZE = 256


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--glue_dir", required=True, help="A folder of GLUE's task folders (SST-2, STS-B, ...).")
    parser.add_argument("--model", action="append", required=True, metavar="NAME=FOLDER",
                        help="A model that run_mlm.py saved, and its name in the table; repeat for several.")
    parser.add_argument("--sst2_train_examples", type=int, default=4000, help="(default: %(default)s)")
    args = parser.parse_args()
    args.models = dict(model.split("=", 1) for model in args.model)
    return args


def features(encoder, tokenizer, texts, max_length):
    """{"<s>": [n, hidden], "mean": [n, hidden], "self-attention": [n]}: the last layer's output at <s>, its mean
    over the tokens, and the share of the last layer's attention from <s> on itself (mean over the heads)."""
    import tensorflow as tf

    at_start, means, on_itself = [], [], []
    for start in range(0, len(texts), BATCH_SIZE):
        inputs = tokenizer(texts[start:start + BATCH_SIZE], padding=True, truncation=True, max_length=max_length,
                           return_tensors="tf")
        outputs = encoder(**inputs, output_attentions=True)
        mask = tf.cast(inputs["attention_mask"], outputs.last_hidden_state.dtype)[..., tf.newaxis]
        at_start.append(outputs.last_hidden_state[:, 0].numpy())
        means.append((tf.reduce_sum(outputs.last_hidden_state * mask, axis=1) / tf.reduce_sum(mask, axis=1)).numpy())
        on_itself.append(tf.reduce_mean(outputs.attentions[-1][:, :, 0, 0], axis=1).numpy())  # [batch, heads, q, k]
    return {"<s>": np.concatenate(at_start), "mean": np.concatenate(means), "self-attention": np.concatenate(on_itself)}


def scores(encoder, tokenizer, sst2, stsb):
    """{place: (SST-2 probe accuracy, STS-B cosine Spearman)} for place <s> and mean, and the share of <s>'s
    attention on itself."""
    sst2_length, stsb_length = TASKS["sst2"][1], TASKS["stsb"][1]
    train = features(encoder, tokenizer, sst2["train"].texts, sst2_length)
    dev = features(encoder, tokenizer, sst2["validation"].texts, sst2_length)
    first = features(encoder, tokenizer, stsb["validation"].texts, stsb_length)
    second = features(encoder, tokenizer, stsb["validation"].text_pairs, stsb_length)
    results = {}
    for place in ("<s>", "mean"):
        probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
        accuracy = probe.fit(train[place], sst2["train"].labels).score(dev[place], sst2["validation"].labels)
        u, v = first[place], second[place]
        cosine = (u * v).sum(axis=1) / (np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1))
        results[place] = accuracy, spearmanr(cosine, stsb["validation"].labels).statistic
    return results, dev["self-attention"].mean()


def main(args):
    import tf_keras as keras
    from transformers import AutoConfig, AutoTokenizer, TFAutoModel

    stsb = read_splits(os.path.join(args.glue_dir, TASKS["stsb"][0]), "stsb")
    with tempfile.TemporaryDirectory() as folder:
        sst2 = read_splits(sst2_subset(args.glue_dir, folder, args.sst2_train_examples), "sst2")
    print(describe_machine())
    rows = []
    for name, folder in [*args.models.items(), (FROM_SCRATCH, next(iter(args.models.values())))]:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        if name == FROM_SCRATCH:
            keras.utils.set_random_seed(0)
            encoder = TFAutoModel.from_config(AutoConfig.from_pretrained(folder))
        else:
            encoder = TFAutoModel.from_pretrained(folder)  # The encoder alone: the LM head is left out.
        results, on_itself = scores(encoder, tokenizer, sst2, stsb)
        rows += [[name, f"{100 * on_itself:.0f} %", place, f"{100 * accuracy:.1f}", f"{100 * spearman:.1f}"]
                 for place, (accuracy, spearman) in results.items()]
    labels = sst2["train"].labels
    majority = np.mean(np.array(sst2["validation"].labels) == max(set(labels), key=labels.count))
    rows.append(["majority class", "", "", f"{100 * majority:.1f}", ""])
    print_table(["model", "<s> attends to itself", "features at", "SST-2 probe accuracy",
                 "STS-B cosine, Spearman × 100"], rows)


if __name__ == "__main__":
    try:
        main(parse_args())
    except UserError as err:  # A GLUE folder without the files.
        raise SystemExit(f"error: {err}")
