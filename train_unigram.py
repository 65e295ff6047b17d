#!/usr/bin/env python
"""Step 1 of 3: train a Unigram tokenizer on a text corpus and save it as a 🤗 Transformers fast tokenizer.

A model pre-trained from scratch gets a vocabulary fitted to its own corpus. This script streams the texts of
one split (the Hub's WikiText-103 by default, or text files, local or gs://, or local JSON-lines / Parquet files),
skips empty and whitespace-only records, trains a Unigram model (the SentencePiece algorithm) with 🤗 Tokenizers,
and saves the result to --output_dir, where `AutoTokenizer.from_pretrained(output_dir)` loads it offline. A gs://
--output_dir receives a copy of the saved folder (and step 2 and 3 read the tokenizer from there).

The special tokens follow RoBERTa's layout, so that a RobertaConfig, the masking step of run_mlm.py and the
`fill-mask` pipeline all agree without extra settings:

    id 0  <s>     beginning of sequence, also the classifier token (bos_token, cls_token)
    id 1  <pad>   padding (pad_token; RobertaConfig's default pad_token_id is 1)
    id 2  </s>    end of sequence, also the separator (eos_token, sep_token)
    id 3  <unk>   unknown (the Unigram model's fallback; WikiText's literal "<unk>" maps to it too)
    id 4  <mask>  the token that masked language modelling hides words behind (mask_token)

The post-processor wraps every encoded text as `<s> text </s>` (a pair as `<s> A </s></s> B </s>`), so each
document in the concatenated training stream of step 2 is delimited.

Example:
    python train_unigram.py --train_file data/train.txt --vocab_size 8000 --output_dir unigram-tokenizer
"""

import argparse
import logging
import shutil
import tempfile
import time

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from utils import (add_corpus_arguments, check_gcs_path, check_output_dir, is_gcs_path, push_folder_to_hub,
                   text_batches, upload_to_gcs)

logger = logging.getLogger("train_unigram")

# <mask> and <unk> absorb the space before them (lstrip), as in RoBERTa: in "is <mask> ." the mask then stands
# where a whole word "▁word" stood in training, instead of after a stray "▁" token.
SPECIAL_TOKENS = {"bos_token": "<s>", "pad_token": "<pad>", "eos_token": "</s>",
                  "unk_token": AddedToken("<unk>", lstrip=True, special=True),
                  "mask_token": AddedToken("<mask>", lstrip=True, special=True)}


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
    if args.vocab_size <= len(SPECIAL_TOKENS):
        parser.error(f"--vocab_size must be larger than the {len(SPECIAL_TOKENS)} special tokens.")
    return args


def build_tokenizer():
    """An untrained Unigram tokenizer: NFKC normalization, and "▁" marking where words begin (Metaspace)."""
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    return tokenizer


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
    batches = next(iter(corpus.values()))  # The one split asked for: "train" of the files, or --split.

    texts_seen = 0

    def texts():
        nonlocal texts_seen
        for batch in batches:
            texts_seen += len(batch)
            yield batch

    tokenizer = build_tokenizer()
    # Special tokens listed first get the first ids, in this order: the layout in the module docstring.
    trainer = trainers.UnigramTrainer(vocab_size=args.vocab_size, special_tokens=list(SPECIAL_TOKENS.values()),
                                      unk_token=str(SPECIAL_TOKENS["unk_token"]), show_progress=True)
    tokenizer.train_from_iterator(texts(), trainer=trainer)
    if texts_seen == 0:
        raise SystemExit("error: the input holds no text (every record is empty or whitespace). "
                         "Check --train_file / --dataset_name and --text_column.")
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
