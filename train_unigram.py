#!/usr/bin/env python
"""Step 1 of 3: train a Unigram tokenizer on a text corpus and save it as a 🤗 Transformers fast tokenizer.

A model pre-trained from scratch gets a vocabulary fitted to its own corpus. This script streams the non-blank
texts of one split (the Hub's WikiText-103 by default, or text files, local or gs://, or local JSON-lines / Parquet
files; text and JSON-lines files compressed too, .gz, .bz2, .xz or .zst, read as they are), trains a Unigram model
on them, or on a uniform random sample of them (--sample_size), with SentencePiece's trainer, and saves it as a 🤗
Tokenizers model to --output_dir (local or gs://), where `AutoTokenizer.from_pretrained(output_dir)` loads it
offline.

The special tokens follow RoBERTa's layout, so that a RobertaConfig, the masking step of run_mlm.py and the
`fill-mask` pipeline all agree without extra settings; every text is encoded as `<s> text </s>` (a pair as
`<s> A </s></s> B </s>`), which delimits each document in the concatenated training stream of step 2:

    id 0  <s>     beginning of sequence, also the classifier token (bos_token, cls_token)
    id 1  <pad>   padding (pad_token; RobertaConfig's default pad_token_id is 1)
    id 2  </s>    end of sequence, also the separator (eos_token, sep_token)
    id 3  <unk>   unknown (the Unigram model's fallback; WikiText's literal "<unk>" maps to it too)
    id 4  <mask>  the token that masked language modelling hides words behind (mask_token)

Text comes back as typed: decode(encode(text)) gives the text after NFKC normalization, the one its users expect
(full-width Latin "ＡＢＣ" is "ABC", half-width katakana "ｶﾅ" is "カナ"), but with Chinese and Japanese full-width
punctuation ("，", "？") kept, and Thai's and Lao's AM vowel "ำ" and "ຳ" kept whole (NFKC alone splits them in two).

By default every character of the corpus gets a token (the setting of the figures in benchmarks/). A corpus of many
distinct characters (Chinese, Japanese) may need more than the vocabulary holds: --character_coverage 0.9995 gives
tokens to the characters of all but the rarest 0.05 % of the text, and --byte_fallback spells the others, and any
character unseen in training, in UTF-8 byte tokens <0x00> to <0xFF> (256 of the vocabulary) instead of <unk>, so
that they still come back as typed. Where the characters still do not fit, the script says how many there are and
what to pass.

Why SentencePiece's trainer, not 🤗 Tokenizers' UnigramTrainer: the latter counts substrings over the distinct
words, each once, so a frequent word that starts no other one ("and", ",") never becomes a token ("▁and") and costs
two, "▁" + word. SentencePiece counts them in the text itself (benchmarks/tokenizer_quality.py compares the two).

Examples:
    python train_unigram.py --train_file data/train.txt --vocab_size 8000 --output_dir unigram-tokenizer
    python train_unigram.py --train_file data/zh.txt --vocab_size 16000 --character_coverage 0.9995 --byte_fallback
"""

import argparse
import io
import itertools
import logging
import math
import os
import random
import re
import sys
import time

import sentencepiece as spm
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from corpus import add_corpus_arguments, text_batches
from utils import (UserError, check_gcs_path, check_output_dir, match_files, positive_int,
                   refuse_an_output_that_is_read, save_folder, share)

logger = logging.getLogger("train_unigram")

# <mask> and <unk> absorb the space before them (lstrip), as in RoBERTa: in "is <mask> ." the mask then stands
# where a whole word "▁word" stood in training, instead of after a stray "▁" token.
SPECIAL_TOKENS = {"bos_token": "<s>", "pad_token": "<pad>", "eos_token": "</s>",
                  "unk_token": AddedToken("<unk>", lstrip=True, special=True),
                  "mask_token": AddedToken("<mask>", lstrip=True, special=True)}
UNK_ID = 3
DEFAULT_SEED = 42
# NFKC makes one text of what users type in several ways (full-width and half-width forms, ligatures, no-break
# spaces), but it splits Thai's SARA AM "ำ" into NIKHAHIT + SARA AA "ํา", and Lao's AM "ຳ" likewise: a Thai text
# would decode with the two letters where its writer typed one. They are joined again after NFKC. The two spellings
# look the same, so a text typed with the pair comes back with the one letter, which is what Thai and Lao text holds.
# (NFKC also splits Lao's HO NO "ໜ" and HO MO "ໝ" into "ຫນ" and "ຫມ"; both of those spellings are in use and look
# different, so joining them would change the other one's text: they stay as NFKC leaves them.)
JOINED_AFTER_NFKC = {"\u0e4d\u0e32": "\u0e33", "\u0ecd\u0eb2": "\u0eb3"}
# NFKC also makes Chinese and Japanese punctuation, full-width by their typography, the ASCII marks of Latin text
# ("，" becomes ","), which a Chinese reader would see as a typo. These marks are kept: each stands in for NFKC as a
# noncharacter (U+FDD0 on), which Unicode reserves for a program's own use, so that no text holds one.
KEPT_FROM_NFKC = "，！？：；（）～"
# SentencePiece's byte_fallback adds a token for each byte value, after the special tokens.
NUM_BYTE_TOKENS = 256


def vocabulary_size(text):
    """An argparse type: a vocabulary size with room for more than the special tokens."""
    size = int(text)
    if size <= len(SPECIAL_TOKENS):
        raise argparse.ArgumentTypeError(f"must be larger than the {len(SPECIAL_TOKENS)} special tokens, got {size}")
    return size


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    data = parser.add_argument_group("data (a Hub dataset by default, or files with --train_file)")
    add_corpus_arguments(data)
    data.add_argument("--split", default="train", help="Split of the Hub dataset to train on (default: %(default)s).")
    data.add_argument("--train_file", nargs="+",
                      help="Text files (.txt, one record per line; local or gs://), or local JSON-lines "
                           "(.json/.jsonl) or Parquet files, to train on instead of the Hub dataset; globs in "
                           "quotes (\"gs://bucket/corpus/part-*\") stand for the files they match, in order. Text "
                           "and JSON-lines files may be compressed (corpus.txt.gz, .bz2, .xz, .zst): they are read "
                           "as they are. Files named without their format's extension (part-00000) need "
                           "--file_format.")
    parser.add_argument("--vocab_size", type=vocabulary_size, default=10_000,
                        help="Size of the vocabulary, special tokens included (default: %(default)s).")
    characters = parser.add_argument_group(
        "characters (for a corpus of many distinct characters, such as Chinese or Japanese: "
        "--character_coverage 0.9995 --byte_fallback)")
    characters.add_argument("--character_coverage", type=share, default=1.0, metavar="SHARE",
                            help="The most frequent characters, as many as make this share of the text, get a token "
                                 "each; the rarer ones get none and are <unk>, or bytes with --byte_fallback "
                                 "(default: %(default)s, every character gets a token).")
    characters.add_argument("--byte_fallback", action="store_true",
                            help="Spell characters without a token, rare or unseen in training, in UTF-8 byte tokens "
                                 "(256 of the vocabulary) instead of <unk>, so that they come back as typed.")
    sampling = parser.add_argument_group(
        "sampling (SentencePiece holds what it trains on in memory: about 20 bytes per byte of text)")
    sampling.add_argument("--sample_size", type=positive_int,
                          help="Train on a uniform random sample of this many texts, drawn in one pass over every "
                               "text read (the first LIMIT records with --limit) that holds only the sample in memory. "
                               "Typical: 1 to 10 million, as memory allows (1 million texts of 500 bytes: some 10 GB). "
                               "Default: every text.")
    sampling.add_argument("--seed", type=int,
                          help=f"Seed of the --sample_size sample: the same seed draws the same sample from the "
                               f"same input (default: {DEFAULT_SEED}).")
    parser.add_argument("--model_max_length", type=positive_int, default=512,
                        help="Longest sequence the model will accept, stored in the tokenizer "
                             "(default: %(default)s, RoBERTa's).")
    parser.add_argument("--batch_size", type=positive_int, default=1000,
                        help="Texts handed to the trainer at a time (default: %(default)s).")
    parser.add_argument("--output_dir", default="unigram-tokenizer",
                        help="Folder to save the tokenizer to, local or gs://bucket/folder (default: %(default)s).")
    parser.add_argument("--overwrite", action="store_true", help="Write into --output_dir even if it is not empty.")
    parser.add_argument("--push_to_hub", action="store_true",
                        help="After saving locally, push the tokenizer to the Hub repository --hub_model_id.")
    parser.add_argument("--hub_model_id", help="Hub repository to push to, e.g. your-name/unigram-wikitext.")
    args = parser.parse_args()
    if args.push_to_hub and not args.hub_model_id:
        parser.error("--push_to_hub needs --hub_model_id (for example your-name/unigram-wikitext).")
    if args.seed is None:
        args.seed = DEFAULT_SEED
    elif args.sample_size is None:
        parser.error("--seed sets the sample drawn by --sample_size: give --sample_size too, or leave --seed out.")
    elif args.seed < 0:  # random.Random(-n) draws as random.Random(n): two seeds would give one sample.
        parser.error(f"--seed must be 0 or more, got {args.seed}.")
    return args


# SentencePiece skips sentences longer than its max_sentence_length (in bytes), so longer texts are cut at a space
# into chunks of at most this many characters (4 UTF-8 bytes each at most): no piece spans a space, nothing is lost.
MAX_CHUNK_CHARS = 4096


def build_tokenizer(vocab=None, byte_fallback=False):
    """A Unigram tokenizer (untrained without `vocab`, a list of (piece, log probability) with the special tokens
    first): NFKC normalization (but for KEPT_FROM_NFKC and JOINED_AFTER_NFKC), spaces at the ends dropped and runs
    of spaces made one, as SentencePiece trains on them (a trailing space would otherwise become a token "▁"), and
    "▁" marking where words begin (Metaspace). With `byte_fallback`, a character without a token is encoded as the
    byte tokens of its UTF-8 bytes ("中" as <0xE4> <0xB8> <0xAD>), which decoding turns back into the character."""
    tokenizer = Tokenizer(models.Unigram(vocab, unk_id=UNK_ID if vocab else None, byte_fallback=byte_fallback))
    stand_ins = {mark: chr(0xFDD0 + i) for i, mark in enumerate(KEPT_FROM_NFKC)}
    tokenizer.normalizer = normalizers.Sequence(
        [normalizers.Replace(mark, stand_in) for mark, stand_in in stand_ins.items()] + [normalizers.NFKC()]
        + [normalizers.Replace(stand_in, mark) for mark, stand_in in stand_ins.items()]
        + [normalizers.Replace(split, joined) for split, joined in JOINED_AFTER_NFKC.items()]
        + [normalizers.Strip(), normalizers.Replace(Regex(" {2,}"), " ")])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    # Byte tokens are joined into their characters before "▁" becomes a space. Only with byte fallback: otherwise a
    # piece learned from text that spells "<0x41>" would decode as "A".
    tokenizer.decoder = (decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace()]) if byte_fallback
                         else decoders.Metaspace())
    return tokenizer


def sentencepiece_chunks(texts, normalizer):
    """The texts as SentencePiece is to see them: normalized as the 🤗 tokenizer will normalize them, and cut at
    spaces into chunks of at most MAX_CHUNK_CHARS characters."""
    for text in texts:
        text = normalizer.normalize_str(text)
        while len(text) > MAX_CHUNK_CHARS:
            cut = text.rfind(" ", 0, MAX_CHUNK_CHARS + 1)
            cut = cut if cut > 0 else MAX_CHUNK_CHARS  # A single 4096-character "word" is cut where it must be.
            yield text[:cut]
            text = text[cut:].lstrip(" ")
        if text:
            yield text


def train_sentencepiece(texts, vocab_size, normalizer, character_coverage=1.0, byte_fallback=False):
    """Trains a Unigram model with SentencePiece on an iterable of texts, normalized first by `normalizer`; returns
    the serialized model, with the special tokens of SPECIAL_TOKENS at ids 0 to 4 (and with `byte_fallback`, the
    byte tokens <0x00> to <0xFF> after them). The characters of a share `character_coverage` of the text get a
    token each. SentencePiece keeps every text in memory: to bound it, pass a sample (reservoir_sample). Raises
    UserError when those characters alone need more than `vocab_size` tokens."""
    bos, pad, eos, unk, mask = (str(token) for token in SPECIAL_TOKENS.values())
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=sentencepiece_chunks(texts, normalizer), model_writer=model,
            model_type="unigram", vocab_size=vocab_size,
            # The special tokens at the ids of the module docstring; <mask> is a control symbol: never in a piece.
            bos_id=0, pad_id=1, eos_id=2, unk_id=UNK_ID, bos_piece=bos, pad_piece=pad, eos_piece=eos, unk_piece=unk,
            control_symbols=[mask],
            # The texts come normalized by the 🤗 normalizer, the one that runs at encoding time: no second one.
            normalization_rule_name="identity", remove_extra_whitespaces=False,
            # 1.0 by default (SentencePiece's, 0.9995, would leave the rarest characters to <unk>).
            character_coverage=character_coverage, byte_fallback=byte_fallback,
            # Every chunk is loaded: reservoir_sample samples texts, with a seed (SentencePiece's input_sentence_size
            # would count chunks, with a fixed seed).
            max_sentence_length=4 * MAX_CHUNK_CHARS, input_sentence_size=0,
            # A corpus too small for vocab_size gives fewer pieces, which main() reports; the hard limit would fail
            # with a C++ error instead.
            hard_vocab_limit=False,
            num_threads=os.cpu_count(), minloglevel=1)
    except RuntimeError as error:
        # SentencePiece stops with "Vocabulary size is smaller than required_chars. 4000 vs 5006. ...", counting the
        # special and byte tokens in the second number.
        too_many = re.search(r"smaller than required_chars\. \d+ vs (\d+)", str(error))
        if not too_many:
            raise
        raise UserError(too_many_characters_message(int(too_many.group(1)), vocab_size, character_coverage,
                                                    byte_fallback)) from None
    return model.getvalue()


def too_many_characters_message(tokens_needed, vocab_size, character_coverage, byte_fallback):
    """What to do when the characters that must each get a token, with the special and byte tokens, need
    `tokens_needed` tokens, more than `vocab_size`."""
    fixed_tokens = len(SPECIAL_TOKENS) + (NUM_BYTE_TOKENS if byte_fallback else 0)
    if character_coverage == 1:
        fewer_characters = ("--character_coverage 0.9995 (SentencePiece's choice for Chinese and Japanese: the "
                            "characters of the rarest 0.05 % of the text get no token of their own; lower it to "
                            "0.999 or 0.995 if they are still too many)")
    else:
        fewer_characters = (f"a --character_coverage below {character_coverage:g} (more of the rarest characters "
                            "then get no token of their own)")
    spelled_in_bytes = "" if byte_fallback else " and --byte_fallback (so that those are spelled in bytes, not <unk>)"
    return (f"the corpus has more distinct characters than a vocabulary of {vocab_size} tokens can hold: at "
            f"--character_coverage {character_coverage:g}, {tokens_needed - fixed_tokens} characters need a token "
            f"each, {tokens_needed} tokens with the {fixed_tokens} special{' and byte' if byte_fallback else ''} "
            f"tokens. Nothing was saved. Pass {fewer_characters}{spelled_in_bytes}, or --vocab_size {tokens_needed} "
            "or more.")


def tokenizer_from_sentencepiece(model):
    """The 🤗 `Tokenizer` that encodes as the serialized SentencePiece `model` does (the same pieces, ids and scores
    in a 🤗 Unigram model, behind build_tokenizer's normalizer and pre-tokenizer), wrapping texts as RoBERTa does."""
    processor = spm.SentencePieceProcessor(model_proto=model)
    vocab = [(processor.id_to_piece(i), processor.get_score(i)) for i in range(processor.get_piece_size())]
    names = [str(token) for token in SPECIAL_TOKENS.values()]
    assert [piece for piece, _ in vocab[:len(names)]] == names, vocab[:len(names)]
    # A model trained with byte fallback has byte tokens, after the special tokens. (A text that spells one, such as
    # "<0x41>", is read as that token by the 🤗 Unigram model, as by every converted SentencePiece model that has
    # them; SentencePiece itself would spell it out.)
    tokenizer = build_tokenizer(vocab, byte_fallback=processor.is_byte(len(names)))
    # The special tokens keep their ids (they are in the vocabulary already) and are matched before the model runs.
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS.values()))
    bos, eos = SPECIAL_TOKENS["bos_token"], SPECIAL_TOKENS["eos_token"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, tokenizer.token_to_id(bos)), (eos, tokenizer.token_to_id(eos))])
    return tokenizer


def train_tokenizer(texts, vocab_size, character_coverage=1.0, byte_fallback=False):
    """Trains a Unigram model with SentencePiece on an iterable of texts; returns it as a 🤗 `Tokenizer`
    (train_sentencepiece says what the arguments do)."""
    return tokenizer_from_sentencepiece(train_sentencepiece(texts, vocab_size, build_tokenizer().normalizer,
                                                            character_coverage, byte_fallback))


def reservoir_sample(batches, size, seed):
    """A uniform random sample of `size` texts from `batches`, an iterable of lists of texts of unknown total
    length, and the number of texts read: (sample, num_read); with `size` texts or fewer, all of them, in order.
    Memory holds the sample only (random.sample would need every text), and the same seed gives the same sample
    however the texts are batched: the draws depend on the texts' positions alone.

    Li's Algorithm L (ACM TOMS, 1994): instead of a draw for every text (Algorithm R), it draws how many texts to
    pass over before the next one to take in, which pays when the corpus is many times the sample (measured once,
    with no benchmark command: in the history of benchmarks/README.md, git log -p benchmarks/README.md)."""
    # Algorithm L, seen as: every text gets a uniform random key in (0, 1), and the sample is the `size` texts of
    # smallest keys. W is the largest key in the sample. A later text enters when its key is below W, so the texts
    # passed over before the next one to enter are a geometric number, of success probability W; it replaces the
    # member of largest key, which is any member with equal probability; and the new W is the largest of `size`
    # uniform keys below W: W * U ** (1 / size), U uniform. W is kept as its log, which stays exact near 1.
    rng = random.Random(seed)
    sample, num_read = [], 0
    log_w = 0.0  # W = 1 until the sample is full: every text enters.

    def gap():  # Lowers W to the largest key in the sample; returns how many texts to pass over before the next.
        nonlocal log_w
        log_w += math.log(open_unit_random(rng)) / size
        return math.floor(math.log(open_unit_random(rng)) / log_one_minus_exp(log_w))

    next_index = None  # Position in the stream of the next text to take in, once the sample is full.
    for batch in batches:
        start, num_read = num_read, num_read + len(batch)
        if len(sample) < size:  # The first `size` texts all go in.
            sample.extend(batch[:size - len(sample)])
            if len(sample) < size:
                continue
            next_index = size + gap()
        while next_index < num_read:
            sample[rng.randrange(size)] = batch[next_index - start]
            next_index += 1 + gap()
    return sample, num_read


def open_unit_random(rng):
    """A uniform random number in the open interval (0, 1), whose log is finite: random() may return 0.0."""
    while (value := rng.random()) == 0.0:
        pass
    return value


def log_one_minus_exp(x):
    """log(1 - exp(x)) for x < 0, accurate at both ends (Maechler, 2012). Near 0, 1 - exp(x) rounds to 0 and its
    log fails, where -expm1(x) is exact; far below, 1 - exp(x) rounds to 1 and its log to 0, where log1p is exact."""
    return math.log(-math.expm1(x)) if x > -math.log(2) else math.log1p(-math.exp(x))


def main(args):
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    start = time.perf_counter()

    # Fail before the long part, not after it.
    refuse_an_output_that_is_read(args.output_dir, args.train_file or [])
    for path in args.train_file or []:
        check_gcs_path(path)
    data_files = None  # The Hub dataset.
    if args.train_file:  # Each glob expanded once, here, into the files it matches.
        data_files = {"train": [path for path, _ in match_files(args.train_file, "train file")]}
    check_gcs_path(args.output_dir, write=True)
    check_output_dir(args.output_dir, args.overwrite)
    (batches,) = text_batches(data_files=data_files, file_format=args.file_format,
                              dataset_name=args.dataset_name, dataset_config=args.dataset_config, splits=[args.split],
                              trust_remote_code=args.trust_remote_code, text_column=args.text_column,
                              batch_size=args.batch_size, limit=args.limit).values()  # The one split asked for.
    # Read the first batch now: a wrong column or an input with no text fails here, before SentencePiece starts.
    read_start = time.perf_counter()
    first = next(batches, None)
    if first is None:
        raise UserError("the input holds no text (every record is empty or whitespace). "
                        "Check --train_file / --dataset_name and --text_column.")
    batches = itertools.chain([first], batches)
    if args.sample_size:
        sample, num_read = reservoir_sample(batches, args.sample_size, args.seed)
        seconds = time.perf_counter() - read_start
        logger.info("Read %d non-empty texts in %.1f s (%.0f texts/s); kept %s", num_read, seconds, num_read / seconds,
                    f"a uniform random sample of {len(sample)} (--seed {args.seed})" if len(sample) < num_read
                    else f"all of them: --sample_size {args.sample_size} is not smaller")
        batches = [sample]

    num_texts, read_errors = 0, []

    def texts():  # Counts the texts as SentencePiece reads them, and keeps what stops the reading.
        nonlocal num_texts
        try:
            for batch in batches:
                num_texts += len(batch)
                yield from batch
        except UserError as error:
            read_errors.append(error)
            raise

    logger.info("Training a Unigram model of %d tokens with SentencePiece", args.vocab_size)
    try:
        tokenizer = train_tokenizer(texts(), args.vocab_size, args.character_coverage, args.byte_fallback)
    except RuntimeError:  # SentencePiece raises an error of the texts' reading (bad input) as its own RuntimeError.
        if read_errors:
            raise read_errors[0] from None
        raise
    vocab_size = tokenizer.get_vocab_size()
    # An error, not a warning: every later step (shards, model size) would follow the smaller vocabulary unseen.
    if vocab_size < args.vocab_size:
        raise UserError(
            f"the corpus could not give a vocabulary of {args.vocab_size} tokens, only {vocab_size} (special "
            f"tokens included): its {num_texts} texts are too little text for more. Nothing was saved. Train on more "
            f"text (a larger --limit or --sample_size, if you set one), or pass --vocab_size {vocab_size} to train "
            "on this corpus.")
    fast_tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, model_max_length=args.model_max_length,
        cls_token=SPECIAL_TOKENS["bos_token"], sep_token=SPECIAL_TOKENS["eos_token"], **SPECIAL_TOKENS)
    logger.info("Trained on %d texts in %.1f s: a vocabulary of %d tokens", num_texts, time.perf_counter() - start,
                vocab_size)
    save_folder(args.output_dir, fast_tokenizer.save_pretrained, "Tokenizer",
                args.hub_model_id if args.push_to_hub else None, "Upload Unigram tokenizer")


if __name__ == "__main__":
    try:
        main(parse_args())
    except UserError as err:  # Bad input: its message alone, without a traceback.
        sys.exit(f"error: {err}")
