#!/usr/bin/env python
"""Tokenizer quality: how well a Unigram vocabulary fits the text, trained four ways on the same lines.

    hf-default     🤗 Tokenizers' UnigramTrainer as train_unigram.py used it before (NFKC, Metaspace, defaults)
    hf-subiter     the same with --hf_n_sub_iterations EM steps between prunings (the one setting found to help)
    spm-reference  SentencePiece's own Unigram trainer with its defaults, measured with its own encoder
    train_unigram  train_unigram.py now: SentencePiece's trainer, converted to a 🤗 Tokenizers model

For each: the share of validation tokens that are a bare "▁" (a word start with nothing after it: the word then
costs two tokens or more), tokens per whitespace-separated word, whether "▁a", "▁and", "▁,", "▁." are in the
vocabulary, training seconds and peak memory. No <s> or </s> is added. Every run is a process of its own,
so that its peak resident memory (getrusage) is its own; "before" is the peak once the libraries are imported and
the lines read, so peak minus before is what training added.

The texts are the non-blank lines without their line break, as train_unigram.py reads a text file. The machine is
shared: timings are disturbed by other work and vary from run to run; the runs of one table are taken one after the
other in one invocation.

Example:
    python benchmarks/tokenizer_quality.py --train_file wikitext-2-v1/train.txt \\
        --validation_file wikitext-2-v1/validation.txt --vocab_size 8000
"""

import argparse
import multiprocessing
import os
import resource
import sys
import time

from common import REPO, describe_machine, load_average, print_table

DEFAULT_DATA = REPO / "tests" / "data" / "wikitext-2"
PIECES = ["▁a", "▁and", "▁,", "▁."]
VARIANTS = ["hf-default", "hf-subiter", "spm-reference", "train_unigram"]


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f if not line.isspace()]


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB.


def train_hf(lines, vocab_size, n_sub_iterations):
    """🤗 Tokenizers' UnigramTrainer, set up as train_unigram.py was before it switched to SentencePiece."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    special = ["<s>", "<pad>", "</s>", AddedToken("<unk>", lstrip=True, special=True),
               AddedToken("<mask>", lstrip=True, special=True)]
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=special, unk_token="<unk>",
                                      n_sub_iterations=n_sub_iterations, show_progress=False)
    tokenizer.train_from_iterator(lines, trainer=trainer)
    return tokenizer


def tokens_of_hf(tokenizer, lines):
    return [encoding.tokens for encoding in tokenizer.encode_batch(lines, add_special_tokens=False)]


def spm_tokens(processor, lines):
    """SentencePiece's own encoding, with WikiText's literal "<unk>" as one token.

    The 🤗 tokenizers match "<unk>" as their special token (and absorb the space before it). SentencePiece's encoder
    has no such step: it would spell "<unk>" as "▁", "<", "un", "k", ">", which on WikiText-2 validation (11,718 of
    them) alone adds about 0.2 tokens per word and 3 points of bare "▁". Counting it as one token, as the others do,
    compares the vocabularies and not that step.
    """
    tokens = []
    for line in lines:
        parts = processor.encode(line.split("<unk>"), out_type=str)
        tokens.append([token for i, part in enumerate(parts) for token in (["<unk>"] if i else []) + part])
    return tokens


def run_variant(variant, train_file, validation_file, vocab_size, hf_n_sub_iterations, sample_size, seed):
    """Trains one variant and measures it; runs in a process of its own."""
    import sentencepiece as spm
    sys.path.insert(0, str(REPO))
    import train_unigram

    lines, validation = read_lines(train_file), read_lines(validation_file)
    before = peak_rss_mib()
    start = time.perf_counter()
    if variant == "spm-reference":
        import io
        model = io.BytesIO()
        # Its defaults (nmt_nfkc normalization, character_coverage 0.9995, <unk> at id 0) and the vocabulary size;
        # a soft limit only so that a small corpus does not fail.
        spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, model_type="unigram",
                                       vocab_size=vocab_size, hard_vocab_limit=False,
                                       num_threads=os.cpu_count(), minloglevel=2)
        seconds, peak = time.perf_counter() - start, peak_rss_mib()
        processor = spm.SentencePieceProcessor(model_proto=model.getvalue())
        vocab = {processor.id_to_piece(i) for i in range(processor.get_piece_size())}
        tokens = spm_tokens(processor, validation)
    else:
        if variant == "train_unigram":
            if sample_size:  # As train_unigram.py --sample_size --seed draws it.
                lines, _ = train_unigram.reservoir_sample([lines], sample_size, seed)
            tokenizer = train_unigram.train_tokenizer(iter(lines), vocab_size)
        else:
            tokenizer = train_hf(lines, vocab_size, hf_n_sub_iterations if variant == "hf-subiter" else 2)
        seconds, peak = time.perf_counter() - start, peak_rss_mib()  # Before encoding, which needs memory too.
        vocab = set(tokenizer.get_vocab())
        tokens = tokens_of_hf(tokenizer, validation)
    num_tokens = sum(map(len, tokens))
    bare = sum(token == "▁" for line in tokens for token in line)
    words = sum(len(line.split()) for line in validation)
    return {"variant": variant, "vocab": len(vocab), "bare": 100 * bare / num_tokens,
            "tokens_per_word": num_tokens / words, "pieces": [piece in vocab for piece in PIECES],
            "seconds": seconds, "before": before, "peak": peak}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train_file", default=DEFAULT_DATA / "train.txt",
                        help="Text file to train on (default: %(default)s, the slice of WikiText-2 shipped for the "
                             "tests; the figures of benchmarks/tokenizer.md come from the whole of WikiText-2).")
    parser.add_argument("--validation_file", default=DEFAULT_DATA / "validation.txt",
                        help="Text file to measure on (default: %(default)s).")
    parser.add_argument("--vocab_size", type=int, default=8000,
                        help="Tokens, special ones included (default: %(default)s).")
    parser.add_argument("--hf_n_sub_iterations", type=int, default=5,
                        help="EM steps between prunings for hf-subiter (🤗's default is 2; default: %(default)s).")
    parser.add_argument("--sample_size", type=int, default=0,
                        help="train_unigram trains on a uniform random sample of this many lines, as "
                             "train_unigram.py --sample_size draws it (default: all).")
    parser.add_argument("--seed", type=int, default=42,
                        help="Seed of that sample (default: %(default)s, train_unigram.py's).")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=VARIANTS)
    return parser.parse_args()


def main(args):
    print(describe_machine())
    print(f"train {args.train_file}, validation {args.validation_file}, vocab_size {args.vocab_size}, "
          f"sample_size {args.sample_size or 'all'}" + (f", seed {args.seed}" if args.sample_size else "") + "\n")
    rows = []
    context = multiprocessing.get_context("spawn")  # A fresh interpreter each: its own peak memory.
    for variant in args.variants:
        with context.Pool(1) as pool:
            r = pool.apply(run_variant, (variant, args.train_file, args.validation_file, args.vocab_size,
                                         args.hf_n_sub_iterations, args.sample_size, args.seed))
        rows.append([r["variant"], r["vocab"], f"{r['bare']:.1f} %", f"{r['tokens_per_word']:.3f}",
                     " ".join("yes" if found else "no" for found in r["pieces"]), f"{r['seconds']:.1f}",
                     f"{r['peak']:.0f} ({r['peak'] - r['before']:+.0f})", f"{load_average():.1f}"])
        print(f"{variant} done", file=sys.stderr, flush=True)
    print_table(["trainer", "vocab", 'bare "▁"', "tokens/word", " ".join(PIECES), "train s",
                 "peak MiB (training)", "load"], rows)


if __name__ == "__main__":
    main(parse_args())
