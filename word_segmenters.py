"""Word segmenters for languages written without spaces, chosen at shard time (prepare_tfrecord_shards.py
--word_segmenter): where they say a word begins is stored in the shards beside the token ids, and run_mlm.py's
--masking whole_word (or span) masks those words whole, as Chinese-BERT-wwm (with LTP's words) and the Tohoku
Japanese BERT (with MeCab's) were trained.

Each is a maintained package that only its users install: the name of this table, and `pip install` of its package.
Without a segmenter, run_mlm.py takes each piece that begins with a Chinese character, kana, Thai, Lao, Khmer or
Myanmar for a word of its own (masked_lm.begins_unspaced_word).
"""

import importlib

import numpy as np

from utils import UserError

# name: (module to import, what `pip install` needs, the function of the module that cuts a text into its words).
# pythainlp's newmm and jieba keep the spaces as words of their own; MeCab (fugashi) drops them: word_begins copes
# with both.
SEGMENTERS = {
    "jieba": ("jieba", "jieba", lambda jieba: jieba.lcut),
    "rjieba": ("rjieba", "rjieba", lambda rjieba: rjieba.cut),  # jieba's dictionary and algorithm, in Rust: faster.
    "pythainlp": ("pythainlp.tokenize", "pythainlp",
                  lambda thai: lambda text: thai.word_tokenize(text, engine="newmm", keep_whitespace=True)),
    "fugashi": ("fugashi", "'fugashi[unidic-lite]'",
                lambda fugashi: (lambda tagger: lambda text: [word.surface for word in tagger(text)])(
                    fugashi.Tagger())),
}


def load_word_segmenter(name):
    """The function that cuts a text into its words (a list of strings, in order) for the segmenter `name`, a key of
    SEGMENTERS; UserError if its package is not installed."""
    module_name, package, cutter = SEGMENTERS[name]
    try:
        return cutter(importlib.import_module(module_name))
    except ImportError as err:
        raise UserError(f"--word_segmenter {name} needs the package {package}, which is not installed ({err}). "
                        f"Install it: pip install {package}") from err


def word_begins(text, words):
    """The character offsets in `text` where its `words` (a segmenter's, in order) begin, sorted. A word after
    spaces begins where the spaces do: a tokenizer's "▁" then opens the word it belongs to. Words the segmenter
    changed or that are not found in the text (a normalizing segmenter) are passed over."""
    begins, position, spaces_from = [], 0, None
    for word in words:
        if not word or word.isspace():
            continue
        found = text.find(word, position)
        if found < 0:
            continue
        spaces_from = found
        while spaces_from > position and text[spaces_from - 1].isspace():
            spaces_from -= 1
        begins.append(spaces_from)
        position = found + len(word)
    return np.array(begins, np.int64)


def tokens_beginning_words(offsets, begins):
    """For a text's tokens (their character `offsets`, [tokens, 2], in order), whether each begins a word of
    `begins` (word_begins): one does when a word begins in its characters that no token before it covered. A piece
    that spans the end of one word and the start of the next begins that next word; a token of no characters (a
    special token, offsets (0, 0)) begins none: the masking treats specials on its own."""
    offsets = np.asarray(offsets, np.int64).reshape(-1, 2)
    covered_until = np.maximum.accumulate(np.concatenate([[0], offsets[:-1, 1]]))
    first = np.maximum(offsets[:, 0], covered_until)
    return np.searchsorted(begins, first, "left") < np.searchsorted(begins, offsets[:, 1], "left")
