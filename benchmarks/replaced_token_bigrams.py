#!/usr/bin/env python
"""How much of ELECTRA's replaced-token detection a table of bigrams solves: the ceiling that says whether the
information a discriminator needs is in the text at all.

The validation text is corrupted as `run_mlm.py --objective electra` corrupts it when its generator has learned the
token frequencies and nothing else (its state for the first thousand steps or more on the demo's data): 15 % of the
tokens are chosen, 85 % of those are replaced by a token drawn from the training text's unigram distribution (a
draw of the original token leaves it original). Each token is then scored with its two neighbours by Bayes' rule,
the neighbours taken as independent: the odds that it was replaced are the prior odds times q(token) / P(token |
token before), times P(token after) / P(token after | token) — with P(. | .) the training text's bigram frequencies,
smoothed toward the unigram ones (a pseudo-count of 0.01 per vocabulary entry). The figures are those
run_mlm.py logs for a discriminator: the share of replaced tokens found (called replaced), the share of the
others called replaced, and nats beyond prior (the constant guess's loss less the table's).

    python benchmarks/replaced_token_bigrams.py --tokenizer tokenizer \\
        --train_file wikitext-2-v1/train.txt banking_queries.txt --validation_file wikitext-2-v1/validation.txt
"""

import argparse

import numpy as np

from common import REPO  # noqa: F401 (puts the repository's modules on the path; offline before 🤗's imports)
from transformers import AutoTokenizer
from utils import probability


def token_ids(tokenizer, path):
    """The ids of a text file's lines, one after the other, without special tokens."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    ids = []
    for start in range(0, len(lines), 2000):
        for line in tokenizer(lines[start:start + 2000], add_special_tokens=False)["input_ids"]:
            ids.extend(line)
    return np.asarray(ids, np.int64)


class BigramTable:
    """Unigram and smoothed bigram probabilities of a token stream; bigrams kept as sorted pair ids (no V x V
    array: a vocabulary of 50,000 would need 10 GB)."""

    def __init__(self, ids, vocab_size, pseudo_count=0.01):
        self.vocab_size, self.smoothing = vocab_size, pseudo_count * vocab_size
        counts = np.bincount(ids, minlength=vocab_size) + 0.5
        self.unigram = counts / counts.sum()
        self.follower_counts = np.bincount(ids[:-1], minlength=vocab_size).astype(np.float64)
        self.pairs, self.pair_counts = np.unique(ids[:-1] * vocab_size + ids[1:], return_counts=True)

    def next_given(self, previous, token):
        """P(token | previous), elementwise."""
        pair = previous * self.vocab_size + token
        where = np.minimum(np.searchsorted(self.pairs, pair), len(self.pairs) - 1)
        count = np.where(self.pairs[where] == pair, self.pair_counts[where], 0)
        return (count + self.smoothing * self.unigram[token]) / (self.follower_counts[previous] + self.smoothing)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", required=True, help="The tokenizer of the shards (a folder).")
    parser.add_argument("--train_file", nargs="+", required=True, help="The training text: the table's counts.")
    parser.add_argument("--validation_file", required=True, help="The text to corrupt and score.")
    parser.add_argument("--mlm_probability", type=probability, default=0.15)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def main():
    args = parse_args()

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    table = BigramTable(np.concatenate([token_ids(tokenizer, path) for path in args.train_file]), len(tokenizer))
    text = token_ids(tokenizer, args.validation_file)
    rng = np.random.default_rng(args.seed)
    original = text[1:-1]  # Every token with a neighbour on each side.
    chosen = rng.random(len(original)) < args.mlm_probability
    drawn = rng.choice(table.vocab_size, size=len(original), p=table.unigram)
    corrupted = np.where(chosen & (rng.random(len(original)) < 0.85), drawn, original)
    replaced = corrupted != original
    before, after = text[:-2], text[2:]  # The neighbours, as the text has them (most are not replaced).

    share = replaced.mean()
    log_odds = (np.log(share / (1 - share)) + np.log(table.unigram[corrupted])
                - np.log(table.next_given(before, corrupted))
                + np.log(table.unigram[after]) - np.log(table.next_given(corrupted, after)))
    called = log_odds > 0
    table_loss = np.mean(np.logaddexp(0.0, np.where(replaced, -log_odds, log_odds)))  # Sigmoid cross-entropy.
    guess_loss = -(share * np.log(share) + (1 - share) * np.log(1 - share))
    print(f"{len(original):,} validation tokens, {share:.1%} replaced; constant guess {guess_loss:.3f} nats per token, "
          f"bigram table {table_loss:.3f}: {guess_loss - table_loss:.3f} nats beyond prior "
          f"({(guess_loss - table_loss) / guess_loss:.0%} of the guess's loss); replaced found "
          f"{called[replaced].mean():.1%}, originals called replaced {called[~replaced].mean():.1%}")


if __name__ == "__main__":
    main()
