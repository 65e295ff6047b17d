"""The shard contract between prepare_tfrecord_shards.py, which writes shards, and run_mlm.py, which reads them: both
sides in one file.

- The contract: the names in a split folder, its manifest, the vocabulary fingerprint that ties the shards to their
  tokenizer, the shortest sample worth masking.
- Writing: tokenizing (long texts in pieces), the record bytes (serialized without TensorFlow), each part of a split
  written to shards as it comes, a split started and published (by prepare_tfrecord_shards.py, or on Beam's workers
  through beam_pipeline.py).
- Reading: a split's shards found and checked against their manifest and tokenizer, an interrupted split refused,
  damaged shards named.

TensorFlow is imported inside the readers only: writing shards never pays for it.
"""

import contextlib
import dataclasses
import hashlib
import itertools
import json
import logging
import os
import re
import struct
from concurrent.futures import ThreadPoolExecutor

import google_crc32c
import numpy as np

from corpus import LongText, compression
from utils import UserError, delete, exists, is_gcs_path, open_file, rename
from word_segmenters import load_word_segmenter, tokens_beginning_words, word_begins

logger = logging.getLogger("shards")


# The names of the original Transformers TPU example, whose shards run_mlm.py reads too.
SHARD_NAME = "dataset-{index}-{num_samples}.tfrecord"


SHARD_NAME_PATTERN = re.compile(r"dataset-(\d+)-(\d+)\.tfrecord$")


MANIFEST_NAME = "manifest.json"


TOKEN_COUNTS_NAME = "token_counts.json"


INCOMPLETE_MARKER_NAME = "INCOMPLETE"


# The shortest sample worth masking: two of its tokens may be a document bound (</s> <s>), never masked, and at 15 %
# one sample of 16 tokens in ten still draws no mask (0.85 ** 14); shorter ones leave a mask almost no context.
MIN_MAX_LENGTH = 16


@dataclasses.dataclass
class Manifest:
    """manifest.json of a split folder."""
    split: str
    max_length: int
    num_samples: int
    num_tokens: int
    dropped_tokens: int  # Tokens at the ends of the parts that did not fill a sample.
    num_parts: int  # Parts of the split written side by side (processes or Beam workers), each cut on its own.
    num_texts: int
    tokenizer: str  # What --tokenizer_name_or_path named.
    vocab_size: int
    vocabulary_fingerprint: str  # See vocabulary_fingerprint: run_mlm.py compares it with its tokenizer's.
    # In order: {"file", "num_samples", "num_bytes"}; run_mlm.py compares each size with the file's.
    shards: list
    # The word segmenter whose words the records' "word_starts" hold (--word_segmenter), or None: the records have
    # none, as every shard written before there was a segmenter.
    word_segmenter: str | None = None

    def to_json(self):
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_json(cls, data, path):
        """The manifest in `data` (the bytes of the file at `path`), or UserError saying what is wrong with it."""
        try:
            fields = json.loads(data)
            if all(shard.keys() >= {"file", "num_samples", "num_bytes"} for shard in fields["shards"]):
                return cls(**{field.name: fields[field.name] for field in dataclasses.fields(cls)
                              if field.name in fields or field.default is dataclasses.MISSING})
        except (ValueError, TypeError, KeyError, AttributeError):  # Not JSON, not an object, a field missing.
            pass
        from diagnostics import manifest_error

        raise UserError(manifest_error(cls, data, path))


def vocabulary_fingerprint(tokenizer):
    """A hash of every token of a 🤗 Tokenizers tokenizer with its id: shards and model must agree on what each id
    means. A Tokenizer loaded from tokenizer.json and the backend_tokenizer of its AutoTokenizer give the same."""
    pairs = sorted(tokenizer.get_vocab(with_added_tokens=True).items(), key=lambda pair: pair[1])
    return hashlib.sha256(json.dumps(pairs, ensure_ascii=False).encode()).hexdigest()


# ----------------------------------------------------------------------------------------------------------------
# Writing: tokenizing


# Texts longer than this many characters are tokenized in pieces (see long_text_ids): the encodings of one text
# take some 100 bytes per character, 1.2 GB for a line of 10 MB, where a piece's take a few MB.
MAX_PIECE_CHARS = 16 * 1024


PIECES_PER_CALL = 16  # Tokenized together, on all cores: a few MB of text, as a batch of ordinary lines.


def tokenize(tokenizer, texts):
    """The token ids of a batch of texts, concatenated: token_chunks' arrays in one."""
    return np.concatenate(list(token_chunks(tokenizer, texts)), axis=1)[0]


def token_chunks(tokenizer, texts, segment=None):
    """The token ids of a batch of texts (str, or corpus.LongText), in arrays [1, tokens] that concatenate (on axis
    1) to the whole, tokenized on all cores inside 🤗 Tokenizers. With a word segmenter `segment`
    (word_segmenters.load_word_segmenter), arrays [2, tokens]: the ids, and 1 where a token begins one of its words
    (or is a special token), 0 inside one. Long texts go in pieces, and their tokens come a group of pieces at a
    time: memory is bounded by the batch, not by the longest line."""
    short = []  # The short texts since the last long one.
    for text in texts:
        if isinstance(text, LongText) or len(text) > MAX_PIECE_CHARS:
            if short:
                yield encode(tokenizer, short, segment)
            yield from long_text_ids(tokenizer, text, segment)
            short = []
        else:
            short.append(text)
    yield encode(tokenizer, short, segment)


def encode(tokenizer, texts, segment=None, add_special_tokens=True):
    """token_chunks' array for a list of texts. Without a segmenter, without the character offsets, which cost
    time (encode_batch_fast); with one, the offsets say which tokens begin its words."""
    if segment is None:
        encodings = tokenizer.encode_batch_fast(texts, add_special_tokens=add_special_tokens)
        return np.fromiter(itertools.chain.from_iterable(encoding.ids for encoding in encodings), np.int64)[None]
    encodings = tokenizer.encode_batch(texts, add_special_tokens=add_special_tokens)
    ids = np.fromiter(itertools.chain.from_iterable(encoding.ids for encoding in encodings), np.int64)
    starts = [tokens_beginning_words(encoding.offsets, word_begins(text, segment(text)))
              | np.array(encoding.special_tokens_mask, bool) for text, encoding in zip(texts, encodings)]
    return np.stack([ids, np.concatenate(starts, dtype=np.int64) if starts else np.zeros(0, np.int64)])


def long_text_ids(tokenizer, text, segment=None):
    """The token ids of a long text (str, or corpus.LongText, read back a chunk at a time), in arrays, tokenized in
    pieces of about MAX_PIECE_CHARS characters, each cut just before a space: a piece then begins as a word does
    after a space, and the pieces give the tokens of the whole text (tests/test_faults.py checks it); a text with no
    space for MAX_PIECE_CHARS characters is cut there, which may split a word's tokens. The special tokens the
    tokenizer adds around a text (<s> and </s>) go around the whole: token_chunks' arrays, with `segment` too,
    where each piece is segmented on its own."""
    word = tokenizer.encode("a", add_special_tokens=False).ids
    wrapped = tokenizer.encode("a").ids
    start = next(i for i in range(len(wrapped)) if wrapped[i:i + len(word)] == word)
    rows = 1 if segment is None else 2  # The specials' word-start row: each begins a word.
    prefix, suffix = (np.array([ids, [1] * len(ids)][:rows], np.int64).reshape(rows, -1)
                      for ids in (wrapped[:start], wrapped[start + len(word):]))
    pieces = text_pieces(text.pieces() if isinstance(text, LongText) else [text])
    yield prefix
    while group := list(itertools.islice(pieces, PIECES_PER_CALL)):
        yield encode(tokenizer, group, segment, add_special_tokens=False)
    yield suffix


def text_pieces(chunks):
    """The pieces of long_text_ids from the text's consecutive `chunks`: a piece ends just before the last space
    among its first MAX_PIECE_CHARS characters (one after its first), or after MAX_PIECE_CHARS characters where there
    is none; the rest of the text, once it is no longer than that, is the last piece. Where a cut falls depends only
    on the characters before it, so the chunks' sizes change nothing."""
    text, begin = "", 0  # What is left of the chunks so far, from `begin`.
    for chunk in chunks:
        text, begin = text[begin:] + chunk, 0
        while len(text) - begin > MAX_PIECE_CHARS:
            space = text.rfind(" ", begin + 1, begin + MAX_PIECE_CHARS)
            cut = space if space > 0 else begin + MAX_PIECE_CHARS
            yield text[begin:cut]
            begin = cut
    if len(text) > begin:
        yield text[begin:]


def in_background(items):
    """The items of the iterator `items`, each computed in a thread while the caller works on the one before: 🤗
    Tokenizers releases Python's lock while it encodes. An error raised by `items` is raised here."""
    with ThreadPoolExecutor(1) as thread:
        future = thread.submit(next, items, None)
        while (item := future.result()) is not None:
            future = thread.submit(next, items, None)
            yield item


# ----------------------------------------------------------------------------------------------------------------
# Writing: the records, serialized without TensorFlow: the bytes that tf.io.TFRecordWriter writes for
# tf.train.Example(...).SerializeToString(deterministic=True), in a third of the time (measured once, with no
# benchmark command: in the history of benchmarks/README.md, git log -p benchmarks/README.md).


def varint(value):
    """The protobuf varint of a non-negative Python int."""
    encoded = bytearray()
    while value >= 0x80:
        encoded.append(value & 0x7F | 0x80)
        value >>= 7
    encoded.append(value)
    return bytes(encoded)


def field_header(field_number, size):
    """Tag and length of a length-delimited protobuf field whose value takes `size` bytes."""
    return varint(field_number << 3 | 2) + varint(size)


def int64_feature_entry_prefix(name, values_size):
    """What precedes the packed varints (`values_size` bytes) of the int64 feature `name` in a Features message."""
    int64_list = field_header(1, values_size)  # Int64List.value
    feature = field_header(3, len(int64_list) + values_size)  # Feature.int64_list
    key = field_header(1, len(name.encode())) + name.encode()  # The map entry's key...
    value = field_header(2, len(feature) + len(int64_list) + values_size)  # ...and value.
    return field_header(1, len(key) + len(value) + len(feature) + len(int64_list) + values_size) + key + value \
        + feature + int64_list


def packed_varints(rows):
    """The varints of each row of a 2-D integer array, concatenated, and how many bytes each row takes: every value
    split into 7-bit groups at once, keeping the groups it needs, each with its continuation bit."""
    values = np.asarray(rows, np.int64).view(np.uint64)  # A negative int64 is encoded as its two's complement.
    width = len(varint(int(values.max())))
    sizes = np.ones(values.shape, np.int64)
    for group in range(1, width):
        sizes += values >= np.uint64(1 << 7 * group)
    groups = (values[..., np.newaxis] >> np.arange(width, dtype=np.uint64) * np.uint64(7) & np.uint64(0x7F))
    groups = groups.astype(np.uint8)
    positions = np.arange(width)
    groups |= (positions < sizes[..., np.newaxis] - 1).astype(np.uint8) << 7  # Continuation bits.
    return groups[positions < sizes[..., np.newaxis]].tobytes(), sizes.sum(axis=1)


def masked_crc32c(data):
    crc = google_crc32c.value(data)
    return ((crc >> 15 | crc << 17) + 0xA282EAD8) & 0xFFFFFFFF


class RecordSerializer:
    """Turns samples of token ids (and, with `word_starts`, where words begin: 0 or 1 per token) into TFRecord-framed
    tf.train.Example records, as bytes ready to be written: the varints of a batch at once with numpy; the bytes
    around them depend only on their size, computed once each."""

    def __init__(self, max_length, word_starts=False):
        self.attention_mask_entry = int64_feature_entry_prefix("attention_mask", max_length) + b"\x01" * max_length
        # Values of 0 and 1 take a byte each: the entry's size is known, only its bytes change.
        self.word_starts_entry = int64_feature_entry_prefix("word_starts", max_length) if word_starts else b""
        self.word_starts_size = len(self.word_starts_entry) + max_length if word_starts else 0
        self.prefixes = {}  # Size of a sample's input_ids varints -> the bytes of its record before them.
        self.length_headers = {}  # Size of a record -> its TFRecord length field and that field's CRC.

    def __call__(self, samples, word_starts=None):
        values, sizes = packed_varints(samples)
        starts = None if word_starts is None else np.asarray(word_starts, np.uint8)
        records, start = [], 0
        for row, end in enumerate(np.cumsum(sizes).tolist()):
            record = self.prefix(end - start) + values[start:end]
            if starts is not None:
                record += self.word_starts_entry + starts[row].tobytes()
            records += [self.length_header(len(record)), record, struct.pack("<I", masked_crc32c(record))]
            start = end
        return b"".join(records)

    def prefix(self, values_size):
        if values_size not in self.prefixes:  # Entries in key order: "attention_mask", "input_ids", "word_starts".
            input_ids_entry = int64_feature_entry_prefix("input_ids", values_size)
            features_size = len(self.attention_mask_entry) + len(input_ids_entry) + values_size + self.word_starts_size
            self.prefixes[values_size] = field_header(1, features_size) + self.attention_mask_entry + input_ids_entry
        return self.prefixes[values_size]

    def length_header(self, size):
        if size not in self.length_headers:
            length = struct.pack("<Q", size)
            self.length_headers[size] = length + struct.pack("<I", masked_crc32c(length))
        return self.length_headers[size]


# ----------------------------------------------------------------------------------------------------------------
# Writing a split, part by part


class ShardWriter:
    """Writes the samples of one part of a split to shards of `shard_size` samples as they come, each under a
    temporary name, part-{part}-{i}.tfrecord.tmp: finish_split names them once every part is written."""

    CHUNK_SIZE = 1024  # Samples serialized at a time: bounds the serializer's memory whatever the batch size.

    def __init__(self, split_dir, shard_size, max_length, part, word_starts=False):
        self.split_dir, self.shard_size, self.part = split_dir, shard_size, part
        self.serialize = RecordSerializer(max_length, word_starts)
        self.file, self.num_in_file, self.bytes_in_file = None, 0, 0  # The open shard.
        self.shards = []  # {"file", "num_samples", "num_bytes"} of every complete shard, in order.

    def add(self, samples, word_starts=None):
        while len(samples):
            if self.file is None:
                self.file = open_file(os.path.join(self.split_dir, f"part-{self.part}-{len(self.shards)}.tfrecord.tmp"),
                                      "wb")
            count = min(len(samples), self.shard_size - self.num_in_file, self.CHUNK_SIZE)
            records = self.serialize(samples[:count], None if word_starts is None else word_starts[:count])
            self.file.write(records)
            self.num_in_file, self.bytes_in_file, samples = (self.num_in_file + count,
                                                             self.bytes_in_file + len(records), samples[count:])
            word_starts = None if word_starts is None else word_starts[count:]
            if self.num_in_file == self.shard_size:
                self.close()

    def close(self):
        if self.file is not None:
            self.file.close()
            self.shards.append({"file": f"part-{self.part}-{len(self.shards)}.tfrecord.tmp",
                                "num_samples": self.num_in_file, "num_bytes": self.bytes_in_file})
            self.file, self.num_in_file, self.bytes_in_file = None, 0, 0


def write_part(part, batches, tokenizer, vocab_size, split_dir, args, progress, keep=None):
    """Writes part number `part` of a split: tokenizes the texts of its `batches` that `keep` accepts (all without
    it; see corpus.holdout_side), concatenates the tokens, cuts them every max_length tokens, writes the samples (see
    ShardWriter) and drops the tokens left at the end; with --word_segmenter, where its words begin beside them
    (token_chunks). Calls progress(texts, samples) after each batch. Returns what finish_split needs."""
    # Loaded here, in the process (or Beam worker) that writes the part: a segmenter does not travel between them.
    segment = load_word_segmenter(args.word_segmenter) if args.word_segmenter else None
    writer = ShardWriter(split_dir, args.shard_size, args.max_length, part, word_starts=segment is not None)
    rows = 1 if segment is None else 2  # The token ids, and where words begin.
    leftover = np.zeros((rows, 0), dtype=np.int64)  # Tokens that do not fill a sample yet: they begin the next one.
    token_counts = np.zeros(vocab_size, dtype=np.int64)  # Of the tokens written, for run_mlm.py's baseline.
    num_texts = 0
    def tokens_of_batches():  # (texts finished, tokens): a long text's tokens come in several arrays.
        for texts in batches:
            if keep is not None:
                texts = list(filter(keep, texts))
            yield from ((0, tokens) for tokens in token_chunks(tokenizer, texts, segment))
            yield len(texts), np.zeros((rows, 0), dtype=np.int64)

    for batch_texts, tokens in in_background(tokens_of_batches()):
        stream = np.concatenate([leftover, tokens], axis=1)
        num_samples = stream.shape[1] // args.max_length
        samples, leftover = np.split(stream, [num_samples * args.max_length], axis=1)
        samples = samples.reshape(rows, num_samples, args.max_length)
        writer.add(samples[0], samples[1] if segment is not None else None)
        token_counts += np.bincount(samples[0].ravel(), minlength=vocab_size)
        num_texts += batch_texts
        progress(batch_texts, num_samples)
    writer.close()
    return {"shards": writer.shards, "num_texts": num_texts, "dropped_tokens": leftover.shape[1],
            "token_counts": token_counts}


def start_split(split_dir):
    """Makes `split_dir` an empty folder (with --overwrite, the split's old shards go) that says it is being
    written: INCOMPLETE, until finish_split."""
    delete(split_dir)
    if not is_gcs_path(split_dir):  # Cloud Storage has no folders: a name's prefix is one.
        os.makedirs(split_dir)
    with open_file(os.path.join(split_dir, INCOMPLETE_MARKER_NAME), "w") as f:
        f.write("prepare_tfrecord_shards.py has not finished writing this split: if it is not running, it was "
                "interrupted, and these shards are not the whole split. Run it again (with --overwrite).\n")


def finish_split(split, split_dir, parts, token_counts, tokenizer, vocab_size, args):
    """Publishes a split once all its `parts` (what write_part returned, in the order of the text) are written:
    names their shards dataset-{index}-{num_samples}.tfrecord, numbered across the parts, writes `token_counts` and
    the manifest, and only then deletes INCOMPLETE. Run again after an interruption (Beam retries a failed step), it
    skips the shards renamed before. Returns the manifest."""
    num_samples = sum(shard["num_samples"] for part in parts for shard in part["shards"])
    num_texts, dropped_tokens = (sum(part[name] for part in parts) for name in ("num_texts", "dropped_tokens"))
    if num_samples == 0:
        raise UserError(f"the {split} split gave no sample of {args.max_length} tokens ({num_texts} "
                        f"non-empty texts, {dropped_tokens} tokens). Give it more text, or lower --max_length.")
    shards = []
    for shard in (shard for part in parts for shard in part["shards"]):
        name = SHARD_NAME.format(index=len(shards), num_samples=shard["num_samples"])
        temporary, final = (os.path.join(split_dir, file) for file in (shard["file"], name))
        if exists(temporary) or not exists(final):  # A shard missing under both names is an error.
            rename(temporary, final)
        shards.append({**shard, "file": name})
    manifest = Manifest(split=split, max_length=args.max_length, num_samples=num_samples,
                        num_tokens=num_samples * args.max_length, dropped_tokens=dropped_tokens,
                        num_parts=len(parts), num_texts=num_texts, tokenizer=args.tokenizer_name_or_path,
                        vocab_size=vocab_size, vocabulary_fingerprint=vocabulary_fingerprint(tokenizer),
                        shards=shards, word_segmenter=args.word_segmenter)
    with open_file(os.path.join(split_dir, TOKEN_COUNTS_NAME), "w") as f:
        json.dump(token_counts.tolist(), f)
    manifest_path = os.path.join(split_dir, MANIFEST_NAME)  # Last: a split with a manifest is complete.
    with open_file(manifest_path + ".tmp", "w") as f:
        f.write(manifest.to_json())
    rename(manifest_path + ".tmp", manifest_path)
    delete(os.path.join(split_dir, INCOMPLETE_MARKER_NAME))
    return manifest


def plan_parts(paths, sizes, num_parts):
    """Cuts text files (`sizes` bytes each), one after the other, into `num_parts` contiguous parts of equal size
    (or one per byte, for fewer bytes), each a list of (path, start, end) byte ranges. The cuts fall anywhere:
    reading a byte range gives the lines that begin in it (corpus.iter_text_file_lines), so the parts, read in
    order, give every line once, whole, in order. A compressed file is never cut (its text can only be read from its
    start): a cut that falls inside one moves to the nearer of its ends, so that it is read whole, by one part, and
    there may be fewer parts. Its size is its compressed size, all that is known without reading it."""
    file_starts = list(itertools.accumulate(sizes, initial=0))  # Where each file starts in the concatenation.
    total = file_starts.pop()

    def uncut(cut):  # The cut, moved out of a compressed file.
        for path, first, size in zip(paths, file_starts, sizes):
            if first < cut < first + size and compression(path):
                return first if cut - first < first + size - cut else first + size
        return cut

    cuts = sorted({uncut(total * k // num_parts) for k in range(num_parts + 1)})
    return [[(path, max(start, first) - first, min(end, first + size) - first)
             for path, first, size in zip(paths, file_starts, sizes) if max(start, first) < min(end, first + size)]
            for start, end in zip(cuts, cuts[1:])]


# ----------------------------------------------------------------------------------------------------------------
# Reading: the shards, checked against their manifest and tokenizer before anything is built


def find_shards(path, max_length, tokenizer=None, tokenizer_name=None):
    """The shard files of a folder or glob and their sample counts, checked against `max_length` and, when given,
    the `tokenizer` (which the user named `tokenizer_name`). The counts come from manifest.json, or, for shards of
    the original Transformers example, from the file names. The checks read the manifest, the file list and at most
    one record: cheap, before anything is built."""
    import tensorflow as tf

    is_folder = tf.io.gfile.isdir(path)
    files = sorted(tf.io.gfile.glob(os.path.join(path, "*.tfrecord") if is_folder else path))
    folder = os.path.dirname(files[0]) if files else path if is_folder else None
    manifest_path = folder and os.path.join(folder, MANIFEST_NAME)
    if folder and not tf.io.gfile.exists(manifest_path):
        refuse_an_interrupted_split(folder)
        manifest_path = None
    if not files:
        raise UserError(f"no .tfrecord shard found at {path!r}. Check the path, or write shards there "
                        "with prepare_tfrecord_shards.py.")
    if manifest_path:
        with tf.io.gfile.GFile(manifest_path, "rb") as f:
            manifest = Manifest.from_json(f.read(), manifest_path)
        sizes = refuse_shards_that_are_not_the_manifests(path, files, manifest, manifest_path, tokenizer,
                                                         tokenizer_name)
        shard_max_length = manifest.max_length
    else:
        logger.warning("The shards at %r have no %s, so this script cannot check that they are the whole split, "
                       "nor that they were written with the tokenizer --tokenizer names (shards of the original "
                       "Transformers example have none).", path, MANIFEST_NAME)
        matches = [SHARD_NAME_PATTERN.search(os.path.basename(file)) for file in files]
        if not all(matches):
            raise UserError(f"cannot count the samples of the shards at {path!r}: there is no "
                            f"{MANIFEST_NAME}, and not every file is named dataset-INDEX-NUM_SAMPLES.tfrecord.")
        sizes = [int(match.group(2)) for match in matches]
        with damaged_shards_named(files[:1]):
            record = next(iter(tf.data.TFRecordDataset(files[0]).take(1))).numpy()
        shard_max_length = len(tf.train.Example.FromString(record).features.feature["input_ids"].int64_list.value)
    if shard_max_length != max_length:
        raise UserError(f"the shards at {path!r} hold samples of {shard_max_length} tokens, but "
                        f"--max_length is {max_length}. Pass --max_length {shard_max_length}, or write new shards.")
    return files, sizes


def refuse_shards_that_are_not_the_manifests(path, files, manifest, manifest_path, tokenizer, tokenizer_name):
    """The sample count of each file, after checking that the files are the manifest's, of the sizes it records
    (a truncated copy is found before training: one stat per shard), and written with `tokenizer`'s vocabulary
    (else their ids would mean other tokens, or lie beyond the embedding table: read as zeros on a TPU, silently)."""
    import tensorflow as tf

    listed = {shard["file"]: shard for shard in manifest.shards}
    unlisted = [file for file in files if os.path.basename(file) not in listed]
    if unlisted:
        raise UserError(f"{unlisted[0]!r} is not listed in {manifest_path!r}: the folder mixes shards of "
                        "different runs. Write the shards again into an empty folder.")
    wrong = [f"{file} ({size} bytes, {listed[os.path.basename(file)]['num_bytes']} expected)" for file in files
             if (size := tf.io.gfile.stat(file).length) != listed[os.path.basename(file)]["num_bytes"]]
    if wrong:
        raise UserError(f"{len(wrong)} shard(s) do not have the size that {manifest_path!r} records, so "
                        f"they are truncated or damaged (an interrupted copy?): {', '.join(wrong)}. Copy the "
                        "shards again, or write them again with prepare_tfrecord_shards.py (with --overwrite).")
    if tokenizer is not None and (manifest.vocab_size != len(tokenizer) or manifest.vocabulary_fingerprint
                                  != vocabulary_fingerprint(tokenizer.backend_tokenizer)):
        difference = (f"a vocabulary of {manifest.vocab_size} tokens, but --tokenizer {tokenizer_name!r} has "
                      f"{len(tokenizer)}" if manifest.vocab_size != len(tokenizer) else
                      f"a vocabulary of the same size as that of --tokenizer {tokenizer_name!r}, but other tokens")
        raise UserError(
            f"the shards at {path!r} were written with the tokenizer {manifest.tokenizer!r}, {difference}: "
            "their token ids mean other tokens for this model. Pass the tokenizer the shards were written with "
            f"(--tokenizer {manifest.tokenizer}), or write the shards again with this one "
            f"(prepare_tfrecord_shards.py --tokenizer_name_or_path {tokenizer_name} --overwrite ...).")
    return [listed[os.path.basename(file)]["num_samples"] for file in files]


def refuse_an_interrupted_split(folder):
    """Stops when `folder`, which has no manifest, holds what an interrupted prepare_tfrecord_shards.py leaves."""
    import tensorflow as tf

    leftovers = [name for name in (INCOMPLETE_MARKER_NAME, "*.tfrecord.tmp")
                 if tf.io.gfile.glob(os.path.join(folder, name))]
    if leftovers:
        raise UserError(
            f"the shards at {folder!r} are incomplete: prepare_tfrecord_shards.py was interrupted while "
            f"writing them (the folder holds {' and '.join(leftovers)}, and no {MANIFEST_NAME}). Run "
            "prepare_tfrecord_shards.py again, with --overwrite, and let it finish.")


def read_token_counts(files):
    """How many times each token id occurs in the split of the shard `files` (its token_counts.json: one count per id
    of the vocabulary that find_shards checked), or None for shards without it (those of the original example)."""
    import tensorflow as tf

    path = os.path.join(os.path.dirname(files[0]), TOKEN_COUNTS_NAME)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


def read_word_segmenter(files):
    """The word segmenter whose word starts the records of the shard `files` hold (their manifest's
    word_segmenter), or None: the records hold none, or the shards have no manifest (the original example's)."""
    import tensorflow as tf

    path = os.path.join(os.path.dirname(files[0]), MANIFEST_NAME)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, "rb") as f:
        return Manifest.from_json(f.read(), path).word_segmenter


def shards_word_segmenter(train_files, eval_files):
    """The word segmenter whose words the training shards hold, or None (read_word_segmenter); the evaluation shards
    must hold the same, as one input pipeline reads both."""
    train, evaluation = (read_word_segmenter(files) if files else None for files in (train_files, eval_files))
    if eval_files and evaluation != train:
        raise UserError(f"the training shards ({os.path.dirname(train_files[0])}) hold the words of "
                        f"{train or 'no word segmenter'}, the evaluation shards ({os.path.dirname(eval_files[0])}) "
                        f"those of {evaluation or 'none'}: write both with the same --word_segmenter (in one "
                        "prepare_tfrecord_shards.py command).")
    return train


@contextlib.contextmanager
def damaged_shards_named(files):
    """Turns TensorFlow's DataLossError, which names no file, into an error naming the damaged shards among
    `files`, found by reading them all again (diagnostics.py)."""
    import tensorflow as tf

    try:
        yield
    except tf.errors.DataLossError as error:
        from diagnostics import explain_damaged_shards

        message = explain_damaged_shards(files)
        if message is None:
            raise
        raise UserError(message) from error
