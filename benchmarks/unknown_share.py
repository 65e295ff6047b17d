#!/usr/bin/env python
"""What a tokenizer does not know of held-out text: on each task's dev texts of a language (benchmarks/languages.py's
tasks), the share of tokens that are <unk>, the share that are byte tokens (train_unigram.py --byte_fallback: a
character without a token of its own, spelled in its UTF-8 bytes, <0xE4> ...), and tokens per character.

    python benchmarks/unknown_share.py --language chinese --data_dir ../shared/data/chinese \\
        --tokenizer demo-output/chinese-hour-token/tokenizer
"""

import argparse
import re

import numpy as np

from common import print_table
from languages import LANGUAGES, read_task

BYTE_PIECE = re.compile(r"<0x[0-9A-F]{2}>")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--language", choices=LANGUAGES, required=True)
    parser.add_argument("--data_dir", required=True, help="The language's folder of task folders.")
    parser.add_argument("--tokenizer", action="append", required=True, help="A tokenizer folder; repeat for several.")
    return parser.parse_args()


def main(args):
    from transformers import AutoTokenizer

    dev_texts = {}
    for task_name, task in LANGUAGES[args.language].items():
        dev = read_task(args.data_dir, task, "validation")
        dev_texts[task_name] = [str(text) for text in dev.texts + (dev.text_pairs or [])]
    rows = []
    for name in args.tokenizer:
        tokenizer = AutoTokenizer.from_pretrained(name)
        is_byte = np.array([bool(BYTE_PIECE.fullmatch(piece))
                            for piece in tokenizer.convert_ids_to_tokens(range(len(tokenizer)))])
        for task_name, texts in dev_texts.items():
            ids = np.concatenate([np.array(ids, np.int64) for ids in tokenizer(texts, add_special_tokens=False)[
                "input_ids"]])
            characters = sum(len(text) for text in texts)
            rows.append([name, task_name, f"{len(texts):,}", f"{100 * np.mean(ids == tokenizer.unk_token_id):.3f} %",
                         f"{100 * np.mean(is_byte[ids]):.3f} %", f"{len(ids) / characters:.3f}"])
    print_table(["tokenizer", "dev texts of", "texts", "<unk>", "byte tokens", "tokens per character"], rows)


if __name__ == "__main__":
    main(parse_args())
