#!/usr/bin/env python
"""The share of tokens that each masking actually masks on a split of shards, against the share asked
(--mlm_probability), with the LM head's default cap and without it: token masking; whole words by the pieces' word
marker alone (train_unigram.py's "▁": what run_mlm.py took for words before it knew scripts written without spaces); whole words by
masked_lm.word_start_table (those markers, and each piece of Chinese, kana, Thai, ...); and, on shards written with
--word_segmenter, the segmenter's words. Masked as run_mlm.py's evaluation batches are (from the seed, no shuffle).

    python benchmarks/masked_share.py --shards demo-output/chinese-hour-token/tfrecords/validation \\
        --tokenizer demo-output/chinese-hour-token/tokenizer --mlm_probability 0.15 --max_length 128
"""

import argparse

import numpy as np

from common import describe_machine, print_table
from utils import probability


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", required=True, help="A split folder of shards.")
    parser.add_argument("--tokenizer", required=True, help="The tokenizer the shards were written with.")
    parser.add_argument("--mlm_probability", type=probability, default=0.15)
    parser.add_argument("--max_length", type=int, default=128)
    parser.add_argument("--batches", type=int, default=50, help="Of 32 samples (default: %(default)s).")
    return parser.parse_args()


def main(args):
    import tensorflow as tf
    from transformers import AutoTokenizer

    from masked_lm import default_max_predictions, make_dataset, masked_share, word_start_table
    from shards import find_shards, read_word_segmenter

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    files, _ = find_shards(args.shards, args.max_length, tokenizer, args.tokenizer)
    pieces = tokenizer.convert_ids_to_tokens(range(len(tokenizer)))
    markers_only = np.array([piece.startswith("▁") for piece in pieces])  # train_unigram.py's marker.
    markers_only[[i for i in tokenizer.all_special_ids if i != tokenizer.unk_token_id]] = True
    segmenter = read_word_segmenter(files)
    ways = [("token", None, False), ("whole words: word markers alone", markers_only, False),
            ("whole words: markers and scripts without spaces", word_start_table(tokenizer), False)]
    if segmenter:
        ways.append((f"whole words: {segmenter}'s, from the shards", word_start_table(tokenizer), True))
    rows = []
    for name, word_starts, from_shards in ways:
        cap = default_max_predictions(args.mlm_probability, args.max_length,
                                      "token" if word_starts is None else "whole_word")
        shares = []
        for max_predictions in (cap, 0):
            masking = dict(mask_token_id=tokenizer.mask_token_id, special_token_ids=tokenizer.all_special_ids,
                           vocab_size=len(tokenizer), mlm_probability=args.mlm_probability,
                           max_predictions=max_predictions, word_starts=word_starts)
            dataset = make_dataset(files, tf.distribute.InputContext(), batch_size=32, max_length=args.max_length,
                                   masking=masking, seed=0, training=False, num_batches=args.batches,
                                   word_starts_in_shards=from_shards)
            shares.append(masked_share(dataset.take(args.batches), tokenizer.all_special_ids))
        rows.append([name, f"{100 * shares[0]:.1f} % (cap {cap})", f"{100 * shares[1]:.1f} %"])
    print(describe_machine())
    print(f"{args.shards}: {args.batches} batches of 32 samples of {args.max_length} tokens\n")
    print_table([f"masking, --mlm_probability {args.mlm_probability:g}", "masked, default cap", "without a cap"],
                rows)


if __name__ == "__main__":
    main(parse_args())
