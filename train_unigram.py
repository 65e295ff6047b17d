#!/usr/bin/env python
"""Step 1 of 3: train a Unigram tokenizer on a text corpus and save it as a 🤗 Transformers fast tokenizer.

A model pre-trained from scratch gets a vocabulary fitted to its own corpus. This script streams the texts of
one split (the Hub's WikiText-103 by default, or text files, local or gs://, or local JSON-lines / Parquet files),
skips empty and whitespace-only records, trains a Unigram model with SentencePiece's own trainer, converts it to a
🤗 Tokenizers model, and saves the result to --output_dir, where `AutoTokenizer.from_pretrained(output_dir)` loads
it offline. A gs:// --output_dir receives a copy of the saved folder (and step 2 and 3 read the tokenizer from
there).

The special tokens follow RoBERTa's layout, so that a RobertaConfig, the masking step of run_mlm.py and the
`fill-mask` pipeline all agree without extra settings:

    id 0  <s>     beginning of sequence, also the classifier token (bos_token, cls_token)
    id 1  <pad>   padding (pad_token; RobertaConfig's default pad_token_id is 1)
    id 2  </s>    end of sequence, also the separator (eos_token, sep_token)
    id 3  <unk>   unknown (the Unigram model's fallback; WikiText's literal "<unk>" maps to it too)
    id 4  <mask>  the token that masked language modelling hides words behind (mask_token)

The post-processor wraps every encoded text as `<s> text </s>` (a pair as `<s> A </s></s> B </s>`), so each
document in the concatenated training stream of step 2 is delimited.

Why SentencePiece's trainer and not 🤗 Tokenizers' UnigramTrainer: the latter picks its seed pieces by counting
substrings over the list of distinct words, each written once, not over the text, so how often a word occurs does
not count. In WikiText-2, "and" and "," are each one distinct word that starts no other one: "▁and" and "▁," occur
once in what it counts, are never seeds and never tokens, whatever its settings. Trained there with 8,000 tokens,
it lacks "▁a" and "▁." too, and each of these words costs two tokens, "▁" + word. SentencePiece counts substrings in
the text itself. benchmarks/tokenizer_quality.py compares the two.

Example:
    python train_unigram.py --train_file data/train.txt --vocab_size 8000 --output_dir unigram-tokenizer
"""

import argparse
import io
import itertools
import logging
import os
import shutil
import tempfile
import time

import sentencepiece as spm
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from utils import (add_corpus_arguments, check_gcs_path, check_output_dir, is_gcs_path, push_folder_to_hub,
                   text_batches, upload_to_gcs)

logger = logging.getLogger("train_unigram")

# <mask> and <unk> absorb the space before them (lstrip), as in RoBERTa: in "is <mask> ." the mask then stands
# where a whole word "▁word" stood in training, instead of after a stray "▁" token.
SPECIAL_TOKENS = {"bos_token": "<s>", "pad_token": "<pad>", "eos_token": "</s>",
                  "unk_token": AddedToken("<unk>", lstrip=True, special=True),
                  "mask_token": AddedToken("<mask>", lstrip=True, special=True)}
UNK_ID = 3


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    data = parser.add_argument_group("data (a Hub dataset by default, or files with --train_file)")
    add_corpus_arguments(data)
    data.add_argument("--split", default="train", help="Split of the Hub dataset to train on (default: %(default)s).")
    data.add_argument("--train_file", nargs="+",
                      help="Text files (.txt, one record per line; local or gs://), or local JSON-lines "
                           "(.json/.jsonl) or Parquet files, to train on instead of the Hub dataset.")
    parser.add_argument("--vocab_size", type=int, default=10_000,
                        help="Size of the vocabulary, special tokens included (default: %(default)s).")
    parser.add_argument("--sample_size", type=int, default=0,
                        help="Train on a random sample of this many texts (texts longer than 4,096 characters count "
                             "as several), read from the whole input: SentencePiece holds what it trains on in "
                             "memory, about 20 times its size. Default: all of them.")
    parser.add_argument("--model_max_length", type=int, default=512,
                        help="Longest sequence the model will accept, stored in the tokenizer "
                             "(default: %(default)s, RoBERTa's).")
    parser.add_argument("--batch_size", type=int, default=1000,
                        help="Texts handed to the trainer at a time (default: %(default)s).")
    parser.add_argument("--output_dir", default="unigram-tokenizer",
                        help="Folder to save the tokenizer to, local or gs://bucket/folder (default: %(default)s).")
    parser.add_argument("--overwrite", action="store_true",
                        help="Write into --output_dir even if it is not empty.")
    parser.add_argument("--push_to_hub", action="store_true",
                        help="After saving locally, push the tokenizer to the Hub repository --hub_model_id.")
    parser.add_argument("--hub_model_id", help="Hub repository to push to, e.g. your-name/unigram-wikitext.")
    args = parser.parse_args()
    if args.push_to_hub and not args.hub_model_id:
        parser.error("--push_to_hub needs --hub_model_id (for example your-name/unigram-wikitext).")
    if args.sample_size < 0:
        parser.error("--sample_size must be 0 (all texts) or more.")
    if args.vocab_size <= len(SPECIAL_TOKENS):
        parser.error(f"--vocab_size must be larger than the {len(SPECIAL_TOKENS)} special tokens.")
    return args


# SentencePiece skips sentences longer than its max_sentence_length (in bytes). Longer texts are cut at a space into
# chunks of at most this many characters (4 bytes each at most in UTF-8): no piece spans a space, so the cut loses
# nothing.
MAX_CHUNK_CHARS = 4096


def build_tokenizer(vocab=None):
    """A Unigram tokenizer (untrained without `vocab`, a list of (piece, log probability) with the special tokens
    first): NFKC normalization, spaces at the ends dropped and runs of spaces made one, and "▁" marking where words
    begin (Metaspace). The trimmed spaces are what SentencePiece trains on; without the trim a trailing space would
    become a token "▁" of its own."""
    tokenizer = Tokenizer(models.Unigram(vocab, unk_id=UNK_ID if vocab else None))
    tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Strip(),
                                                 normalizers.Replace(Regex(" {2,}"), " ")])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
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


def train_sentencepiece(texts, vocab_size, normalizer, sample_size=0, num_threads=None):
    """Trains a Unigram model with SentencePiece on an iterable of texts, normalized first by `normalizer`; returns
    the serialized model, with the special tokens of SPECIAL_TOKENS at ids 0 to 4.

    SentencePiece keeps the texts it trains on in memory: all of them, or a random sample of `sample_size` (of
    the chunks of sentencepiece_chunks) drawn while the texts stream through.
    """
    bos, pad, eos, unk, mask = (str(token) for token in SPECIAL_TOKENS.values())
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=sentencepiece_chunks(texts, normalizer), model_writer=model,
        model_type="unigram", vocab_size=vocab_size,
        # The special tokens at the ids of the module docstring; <mask> is a control symbol: never in a piece.
        bos_id=0, pad_id=1, eos_id=2, unk_id=UNK_ID, bos_piece=bos, pad_piece=pad, eos_piece=eos, unk_piece=unk,
        control_symbols=[mask],
        # The texts come normalized by the 🤗 normalizer, the one that runs at encoding time: no second one.
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        # Every character of the corpus gets a token, as 🤗 Tokenizers' trainer did (SentencePiece's default, 0.9995,
        # leaves the rarest characters to <unk>).
        character_coverage=1.0,
        max_sentence_length=4 * MAX_CHUNK_CHARS, input_sentence_size=sample_size, shuffle_input_sentence=True,
        # A small corpus may hold fewer pieces than asked for: fewer tokens then, not an error.
        hard_vocab_limit=False,
        num_threads=num_threads or os.cpu_count(), minloglevel=1)
    return model.getvalue()


def tokenizer_from_sentencepiece(model):
    """The 🤗 `Tokenizer` that encodes as the serialized SentencePiece `model` does (post-processor not yet added):
    the same pieces, ids and scores in a 🤗 Unigram model, behind build_tokenizer's normalizer and pre-tokenizer."""
    processor = spm.SentencePieceProcessor(model_proto=model)
    vocab = [(processor.id_to_piece(i), processor.get_score(i)) for i in range(processor.get_piece_size())]
    names = [str(token) for token in SPECIAL_TOKENS.values()]
    assert [piece for piece, _ in vocab[:len(names)]] == names, vocab[:len(names)]
    tokenizer = build_tokenizer(vocab)
    # The special tokens keep their ids (they are in the vocabulary already) and are matched before the model runs.
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS.values()))
    return tokenizer


def train_tokenizer(texts, vocab_size, sample_size=0, num_threads=None):
    """Trains a Unigram model with SentencePiece on an iterable of texts; returns it as a 🤗 `Tokenizer`."""
    model = train_sentencepiece(texts, vocab_size, build_tokenizer().normalizer, sample_size, num_threads)
    return tokenizer_from_sentencepiece(model)


def add_post_processor(tokenizer):
    """Wraps every encoded text in <s> ... </s>, as RoBERTa expects."""
    bos, eos = SPECIAL_TOKENS["bos_token"], SPECIAL_TOKENS["eos_token"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}",
        pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, tokenizer.token_to_id(bos)), (eos, tokenizer.token_to_id(eos))],
    )


def main():
    args = parse_args()
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    start = time.perf_counter()

    # Fail before the long part, not after it.
    for path in args.train_file or []:
        check_gcs_path(path)
    check_gcs_path(args.output_dir, write=True)
    check_output_dir(args.output_dir, args.overwrite)
    corpus = text_batches(data_files={"train": args.train_file} if args.train_file else None,
                          dataset_name=args.dataset_name, dataset_config=args.dataset_config, splits=[args.split],
                          trust_remote_code=args.trust_remote_code, text_column=args.text_column,
                          batch_size=args.batch_size, limit=args.limit)
    batches = iter(next(iter(corpus.values())))  # The one split asked for: "train" of the files, or --split.
    # Read the first batch now: a wrong column or an input with no text fails here, before SentencePiece starts.
    first = next(batches, None)
    if first is None:
        raise SystemExit("error: the input holds no text (every record is empty or whitespace). "
                         "Check --train_file / --dataset_name and --text_column.")

    texts_seen = 0

    def texts():
        nonlocal texts_seen
        for batch in itertools.chain([first], batches):
            texts_seen += len(batch)
            yield from batch

    logger.info("Training a Unigram model of %d tokens with SentencePiece", args.vocab_size)
    tokenizer = train_tokenizer(texts(), args.vocab_size, args.sample_size)
    add_post_processor(tokenizer)

    fast_tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, model_max_length=args.model_max_length,
        cls_token=SPECIAL_TOKENS["bos_token"], sep_token=SPECIAL_TOKENS["eos_token"], **SPECIAL_TOKENS)
    # save_pretrained writes to local disk only: a gs:// output gets a copy of a local folder.
    local_dir = tempfile.mkdtemp() if is_gcs_path(args.output_dir) else args.output_dir
    fast_tokenizer.save_pretrained(local_dir)
    if local_dir != args.output_dir:
        upload_to_gcs(local_dir, args.output_dir)
    logger.info("Trained on %d texts in %.1f s: vocabulary of %d tokens saved to %s", texts_seen,
                time.perf_counter() - start, tokenizer.get_vocab_size(), args.output_dir)

    if args.push_to_hub:
        url = push_folder_to_hub(local_dir, args.hub_model_id, "Upload Unigram tokenizer")
        logger.info("Pushed to %s", url)
    if local_dir != args.output_dir:
        shutil.rmtree(local_dir)


if __name__ == "__main__":
    main()
