#!/usr/bin/env python
"""Masked-LM models pre-trained with different --masking modes, scored on one footing: the loss at masked tokens of
evaluation shards masked by `token` masking (run_mlm.py's evaluation, same seed, same masks for every model), with
the frequency table's loss there. Each model's own evaluation (whole words, spans) is not comparable across modes:
a whole word is harder to guess than one of its tokens. benchmarks/fine_tuning.py gives the downstream comparison.

    python benchmarks/masking.py --eval_dataset demo-output/tfrecords/validation --max_length 32 \\
        --mlm_probability 0.4 token=demo-output/model whole_word=demo-output/model-whole-word
"""

import argparse
import json
import os

from common import describe_machine, load_average, print_table
from utils import probability


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", metavar="NAME=FOLDER", help="Folders saved by run_mlm.py.")
    parser.add_argument("--eval_dataset", required=True, help="The evaluation shards (a split folder).")
    parser.add_argument("--max_length", type=int, default=128)
    parser.add_argument("--mlm_probability", type=probability, default=0.15)
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--seed", type=int, default=42, help="Of the evaluation masks (default: run_mlm.py's).")
    return parser.parse_args()


def main(args):
    import tensorflow as tf
    from transformers import AutoTokenizer, TFAutoModelForMaskedLM

    from masked_lm import MaskedLMTrainer, default_max_predictions, frequency_log_probs, make_dataset
    from shards import find_shards

    files, sizes = find_shards(args.eval_dataset, args.max_length)
    with open(os.path.join(args.eval_dataset, "..", "train", "token_counts.json")) as f:
        token_counts = json.load(f)
    rows = []
    for name, folder in (model.split("=", 1) for model in args.models):
        tokenizer = AutoTokenizer.from_pretrained(folder)
        masking = dict(mask_token_id=tokenizer.mask_token_id, special_token_ids=tokenizer.all_special_ids,
                       vocab_size=len(tokenizer), mlm_probability=args.mlm_probability,
                       max_predictions=default_max_predictions(args.mlm_probability, args.max_length))
        steps = sum(sizes) // args.batch_size
        context = tf.distribute.InputContext()
        data = make_dataset(files, context, batch_size=args.batch_size, max_length=args.max_length, masking=masking,
                            seed=args.seed, training=False, num_batches=steps)
        trainer = MaskedLMTrainer(TFAutoModelForMaskedLM.from_pretrained(folder), tokenizer.mask_token_id,
                                  frequency_log_probs=frequency_log_probs(token_counts, tokenizer.all_special_ids))
        trainer.compile()
        metrics = trainer.evaluate(data, steps=steps, return_dict=True, verbose=0)
        rows.append([name, f"{metrics['loss']:.3f}", f"{metrics['loss_at_mask']:.3f}",
                     f"{metrics['frequency_loss_at_mask']:.3f}", f"{metrics['nats_beyond_frequency']:+.3f}",
                     f"{metrics['accuracy_at_mask']:.3f}"])
    print_table(["model", "loss", "loss at <mask>", "table's loss there", "nats beyond frequency",
                 "accuracy at <mask>"], rows)
    print(f"\n{describe_machine()}; load average at the end: {load_average()}")


if __name__ == "__main__":
    main(parse_args())
