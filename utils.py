"""What the scripts share on a successful run, and nothing else:

- the shard contract between prepare_tfrecord_shards.py, which writes shards, and run_mlm.py, which reads them;
- Cloud Storage: one small layer over the google-cloud-storage client, for what TensorFlow does not read or write
  itself (text, tokenizer, config and model folders, shards written without TensorFlow);
- reading a text corpus, streamed (train_unigram.py and prepare_tfrecord_shards.py);
- writing shards: tokenizing, the record format and the split's publication, which prepare_tfrecord_shards.py runs
  here and beam_pipeline.py on Beam's workers (so that neither imports the script that is running);
- output folders, the tokenizer and config loaders, and saving a folder locally, to gs:// and to the Hub, with a
  PyTorch copy of a model;
- the hardware flags and the tf.distribute strategy (run_mlm.py and run_classification.py).

What runs only once something has gone wrong (and `python utils.py check-tpu`) is in diagnostics.py. TensorFlow,
🤗 Datasets and 🤗 Transformers are imported inside the functions that need them: the data scripts never pay for
TensorFlow.
"""

import argparse
import atexit
import contextlib
import copy
import dataclasses
import errno
import functools
import glob
import hashlib
import io
import itertools
import json
import logging
import os
import posixpath
import random
import re
import shutil
import struct
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor

import google_crc32c
import numpy as np

logger = logging.getLogger("utils")


class UserError(Exception):
    """Something the user must change (a flag, a file, a folder), in a message that says what and how. Shared code
    and the scripts' functions raise it; each script's entry point prints it as "error: MESSAGE" and exits with
    status 1. A program that calls these functions can catch it like any other exception."""


# ----------------------------------------------------------------------------------------------------------------
# The shard contract. Each split folder holds, written in this order:
#
#   INCOMPLETE                               first; deleted once the manifest is written
#   dataset-{index}-{num_samples}.tfrecord   the samples (the record format: RecordSerializer, below)
#   token_counts.json                        how many times each token id occurs in the samples, a JSON list
#   manifest.json                            last, once every shard is complete: a Manifest

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

    def to_json(self):
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_json(cls, data, path):
        """The manifest in `data` (the bytes of the file at `path`), or UserError saying what is wrong with it."""
        try:
            fields = json.loads(data)
            if all(shard.keys() >= {"file", "num_samples", "num_bytes"} for shard in fields["shards"]):
                return cls(**{field.name: fields[field.name] for field in dataclasses.fields(cls)})
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
# Local files and Cloud Storage. TensorFlow reads and writes gs:// itself (tf.io.gfile, TFRecord files,
# checkpoints); everything else goes through these functions, which take a local path or a gs:// one.


def is_gcs_path(path):
    return str(path).startswith("gs://")


def split_gcs_path(path):
    """("bucket", "folder/name") for "gs://bucket/folder/name"."""
    bucket, _, name = path[len("gs://"):].partition("/")
    return bucket, name


@functools.cache
def gcs_client():
    """A google-cloud-storage client with Application Default Credentials (see diagnostics.CREDENTIALS_ADVICE)."""
    from google.cloud import storage

    return storage.Client()


def gcs_blob(path):
    bucket, name = split_gcs_path(path)
    return gcs_client().bucket(bucket).blob(name)


def gcs_folder(path):
    """The bucket of a gs:// folder and the prefix of its objects: "a/b/" for gs://bucket/a/b, "" for the root."""
    bucket, name = split_gcs_path(path)
    return gcs_client().bucket(bucket), name.rstrip("/") + "/" if name.rstrip("/") else ""


def check_gcs_path(path, *, write=False):
    """Stops at once, saying what to do, when the gs:// `path` cannot be read (with `write`, written): before any
    long work, so that hours of it never end in a failed first write. Writing is probed with an object created and
    deleted, as publishing a shard needs both. Local paths pass."""
    if not is_gcs_path(path):
        return
    bucket, name = split_gcs_path(path)
    prefix = re.split(r"[*?[]", name, maxsplit=1)[0]  # A glob (gs://bucket/train/*.txt) up to its wildcard.
    try:
        next(iter(gcs_client().list_blobs(bucket, prefix=prefix, max_results=1)), None)
        if write:
            probe = gcs_blob(f"gs://{bucket}/{posixpath.join(prefix, f'.write-check-{uuid.uuid4().hex}')}")
            probe.upload_from_string(b"")
            probe.delete()
    except Exception as err:
        from diagnostics import explain_gcs_error

        message = explain_gcs_error(path, bucket, err, write=write)
        if message is None:
            raise
        raise UserError(message) from err


def open_file(path, mode="rb"):
    """A local or gs:// file opened for reading or writing ("rb", "wb", "r", "w"); text is UTF-8."""
    encoding = {} if "b" in mode else {"encoding": "utf-8"}
    if not is_gcs_path(path):
        return open(path, mode, **encoding)
    file = gcs_blob(path).open(mode, **encoding)
    # google-cloud-storage's reader has no readline of its own: IOBase's would call it for every byte.
    return io.BufferedReader(file) if mode == "rb" else file


def exists(path):
    return gcs_blob(path).exists() if is_gcs_path(path) else os.path.exists(path)


def file_size(path):
    if is_gcs_path(path):
        blob = gcs_blob(path)
        blob.reload()  # Its metadata, size included.
        return blob.size
    return os.path.getsize(path)


def rename(source, destination):
    """Moves a file, replacing `destination` (atomically on a local disk; a copy and a delete in a bucket)."""
    if is_gcs_path(source):
        blob = gcs_blob(source)
        blob.bucket.rename_blob(blob, split_gcs_path(destination)[1])
    else:
        os.replace(source, destination)


def folder_entries(path):
    """The names of the files and sub-folders in the folder `path`; [] when it does not exist."""
    if not is_gcs_path(path):
        return os.listdir(path) if os.path.isdir(path) else []
    bucket, prefix = gcs_folder(path)
    listing = bucket.list_blobs(prefix=prefix, delimiter="/")  # One level: the files, then the sub-folders' names.
    names = [blob.name[len(prefix):] for blob in listing] + [folder[len(prefix):-1] for folder in listing.prefixes]
    return sorted(set(names) - {""})  # "": the object that stands for the folder itself.


def delete(path):
    """Deletes a file, or a folder and everything in it; nothing if there is none."""
    if is_gcs_path(path):
        bucket, name = split_gcs_path(path.rstrip("/"))
        for blob in gcs_client().list_blobs(bucket, prefix=name):
            if blob.name == name or blob.name.startswith(name + "/"):
                blob.delete()
    elif os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


@functools.cache  # One copy per path, however many loaders read it.
def local_copy(path):
    """A path that 🤗 libraries can read: `path` itself when it is local (or a Hub id); for a gs:// file, or the
    files of a gs:// folder (not its sub-folders), a copy in a temporary folder deleted when the script exits."""
    if not is_gcs_path(path):
        return path
    local_dir = tempfile.mkdtemp(prefix="from-gcs-")
    atexit.register(shutil.rmtree, local_dir, ignore_errors=True)
    bucket, name = split_gcs_path(path)
    single_file = gcs_client().bucket(bucket).get_blob(name) if name and not name.endswith("/") else None
    if single_file is not None:
        single_file.download_to_filename(os.path.join(local_dir, posixpath.basename(name)))
        return os.path.join(local_dir, posixpath.basename(name))
    bucket, prefix = gcs_folder(path)
    files = [blob for blob in bucket.list_blobs(prefix=prefix, delimiter="/") if not blob.name.endswith("/")]
    if not files:
        raise UserError(f"there is no file at {path!r}.")
    for blob in files:
        blob.download_to_filename(os.path.join(local_dir, blob.name[len(prefix):]))
    return local_dir


def upload_folder(local_dir, path):
    """Copies a local folder, sub-folders included, into the gs:// folder `path`, replacing what is there."""
    for root, _, files in os.walk(local_dir):
        for file in files:
            relative = os.path.relpath(os.path.join(root, file), local_dir).replace(os.sep, "/")
            gcs_blob(posixpath.join(path, relative)).upload_from_filename(os.path.join(root, file))


# A full disk or bucket, as each layer says it: the OS (ENOSPC, EDQUOT; h5py gives only the text), TensorFlow (a
# ResourceExhaustedError, which also means "out of device memory": hence the text), Cloud Storage (a quota).
OUT_OF_SPACE = {"the disk is full (No space left on device)": r"no space left on device",
                "the disk quota is exceeded (Disk quota exceeded)": r"disk quota exceeded",
                "the storage quota is exceeded": r"quota ?exceeded|exceeded .{0,60}quota|insufficient storage"}


def out_of_space_reason(error):
    """What says that `error` is a full disk or bucket, or None when it is another error."""
    if isinstance(error, UserError):  # Already explained.
        return None
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return list(OUT_OF_SPACE)[error.errno == errno.EDQUOT]
    return next((reason for reason, pattern in OUT_OF_SPACE.items()
                 if re.search(pattern, str(error), re.IGNORECASE)), None)


@contextlib.contextmanager
def out_of_space_named(folder, what, then):
    """Turns an error saying that the disk or the bucket is full into a UserError naming `folder`, `what` was being
    written there, and `then` (a text, or a function giving it then): what is left and what to do. Other errors
    pass unchanged."""
    try:
        yield
    except Exception as error:
        reason = out_of_space_reason(error)
        if reason is None:
            raise
        raise UserError(f"no space left to write {what} in {folder!r}: {reason}. "
                        f"{then() if callable(then) else then}") from error


# ----------------------------------------------------------------------------------------------------------------
# Reading a text corpus (train_unigram.py and prepare_tfrecord_shards.py)

# Which 🤗 Datasets builder reads a file, by its extension: the one format detection of the scripts.
FILE_BUILDERS = {".txt": "text", ".text": "text", ".csv": "csv", ".json": "json", ".jsonl": "json",
                 ".parquet": "parquet"}


def file_builder(path):
    return FILE_BUILDERS.get(os.path.splitext(path)[1].lower())


def add_corpus_arguments(group):
    """The corpus flags that train_unigram.py and prepare_tfrecord_shards.py share; each adds its file flags."""
    group.add_argument("--dataset_name", default="Salesforce/wikitext",
                       help="Dataset on the Hugging Face Hub (default: %(default)s).")
    group.add_argument("--dataset_config", default="wikitext-103-raw-v1",
                       help="Configuration of the Hub dataset (default: %(default)s).")
    group.add_argument("--text_column", default="text",
                       help="Column holding the text, for Hub datasets and JSON/Parquet files (default: %(default)s).")
    group.add_argument("--limit", type=positive_int,
                       help="Read only the first LIMIT records of each split, for a quick run (default: all).")
    group.add_argument("--trust_remote_code", action="store_true",
                       help="Allow a Hub dataset to run its own loading script. Off by default: only turn it on "
                            "for datasets whose code you trust.")


def text_batches(*, text_column, batch_size, limit=None, data_files=None, dataset_name=None, dataset_config=None,
                 splits=None, trust_remote_code=False):
    """{split: iterator of lists of up to `batch_size` texts}, empty and whitespace-only texts left out, `limit`
    records read at most per split, streamed: memory stays flat whatever the corpus size. From `data_files`
    ({split: [paths]}) or the Hub dataset `dataset_name` (`splits`: those to read, None for all). Text files are
    read here, at disk speed; the others through 🤗 Datasets."""
    file_format = data_files_format(data_files) if data_files else None  # Every file checked, once.
    if file_format == "text":
        if text_column != "text":  # As 🤗 Datasets' "text" builder, whose only column is "text".
            raise UserError(f"the data has no column {text_column!r}; its columns are ['text']. "
                            "Choose one with --text_column.")
        return {split: iter_text_file_batches(paths, batch_size, limit) for split, paths in data_files.items()}
    import datasets  # Only here: it takes a second to import.

    if data_files:
        corpus = datasets.load_dataset(file_format, data_files=data_files, streaming=True)
    else:
        check_hub_reachable(dataset_name)
        try:
            corpus = datasets.load_dataset(dataset_name, dataset_config, streaming=True,
                                           trust_remote_code=trust_remote_code)
        except (ConnectionError, FileNotFoundError, ValueError) as err:
            raise UserError(f"could not load the dataset {dataset_name!r} (config {dataset_config!r}) from "
                            f"the Hub: {err}\nCheck the name and config, or pass local files instead "
                            "(--train_file ...).") from err
        missing = [split for split in splits or [] if split not in corpus]
        if missing:
            raise UserError(f"the dataset {dataset_name!r} has no split {missing}; it has {sorted(corpus)}.")
    return {split: iter_text_batches(dataset, text_column, batch_size, limit, f"the {split} split")
            for split, dataset in corpus.items()
            if not splits or split in splits}


def check_hub_reachable(dataset_name):
    """Stops at once when the Hub cannot be reached, instead of after a minute of 🤗 Datasets' retries."""
    from huggingface_hub import HfApi, constants

    if not constants.HF_HUB_OFFLINE:  # Offline, 🤗 Datasets reads its cache, if it has the dataset.
        try:
            HfApi().dataset_info(dataset_name, timeout=10)
        except OSError as err:  # requests' connection and HTTP errors are OSErrors.
            from diagnostics import hub_unreachable_error

            raise UserError(hub_unreachable_error(dataset_name, err)) from err


def data_files_format(data_files, formats=("text", "json", "parquet")):
    """The 🤗 Datasets builder, one of `formats`, that reads every file of `data_files` ({split: [paths]});
    UserError for a missing file, an unknown extension or a mix of formats."""
    builders = set()
    for split, paths in data_files.items():
        for path in paths:
            builder = file_builder(path)
            if builder not in formats:
                extensions = ", ".join(extension for extension, known in FILE_BUILDERS.items() if known in formats)
                raise UserError(f"cannot read {path!r}: unknown extension "
                                f"{os.path.splitext(path)[1].lower()!r}. Use files of one of these: {extensions}.")
            if is_gcs_path(path) and builder != "text":
                raise UserError(f"cannot read {path!r}: JSON-lines and Parquet files are read from local "
                                "disk only. Copy them first (`gcloud storage cp`), or use text files, which are "
                                "read from gs:// directly.")
            if not exists(path):
                raise UserError(f"the {split} file {path!r} does not exist.")
            builders.add(builder)
    if len(builders) > 1:
        raise UserError(f"all input files must have one format, got a mix of {sorted(builders)}.")
    return builders.pop()


def iter_text_batches(dataset, text_column, batch_size, limit=None, source="the input"):
    """The texts of a streamed 🤗 dataset in lists of up to `batch_size`; `limit` records at most. `source` names
    the dataset in errors ("the train split")."""
    if text_column not in (dataset.column_names or [text_column]):
        raise UserError(f"the data has no column {text_column!r}; its columns are {dataset.column_names}. "
                        "Choose one with --text_column.")
    texts = (record[text_column] for record in (dataset.take(limit) if limit is not None else dataset))
    return batches_of_texts(texts, batch_size, f"the {text_column!r} field of record {{}} of {source}")


def iter_text_file_batches(files, batch_size, limit=None):
    """iter_text_batches for text files (paths, or (path, start, end) byte ranges): the texts that 🤗 Datasets'
    "text" builder gives, read at disk speed."""
    return batches_of_texts(itertools.islice(iter_text_file_lines(files), limit), batch_size)


def iter_text_file_lines(files):
    """The lines of text files, without their line breaks: "\\n", "\\r\\n" or "\\r", as Python's universal newlines
    and 🤗 Datasets split them. Each of `files` is a path, or a (path, start, end) byte range: the lines that begin
    in [start, end) (end None: the end of the file), a line beginning at 0 and after each "\\n". Consecutive ranges,
    wherever cut, give each line once (prepare_tfrecord_shards.py cuts files into parts so)."""
    for file in files:
        path, start, end = (file, 0, None) if isinstance(file, (str, os.PathLike)) else file
        with open_file(path, "rb") as f:
            if start:
                f.seek(start - 1)
                f.readline()  # The byte before `start`, up to and with the "\n" that ends its line.
            position = f.tell()
            for line in f:
                if end is not None and position >= end:
                    break
                position += len(line)
                try:
                    text = line.decode("utf-8").removesuffix("\n")
                except UnicodeDecodeError as err:
                    from diagnostics import not_utf8_error

                    raise UserError(not_utf8_error(path, open_file(path, "rb"))) from err
                yield from text.removesuffix("\r").split("\r")


def batches_of_texts(texts, batch_size, where="record {} of the input"):
    """The texts in lists of up to `batch_size`, less empty and whitespace-only ones and None (null: how JSON and
    Parquet write a missing text). Any other value that is not a string (a number, a list, an object) stops the
    run, `where` naming it ("record {} of ...", numbered from 1): it is a wrong --text_column or a damaged export
    more often than a text, and skipping such records could skip a corpus. Every script reads texts here."""
    def texts_only():
        for number, text in enumerate(texts, start=1):
            if text is not None and not isinstance(text, str):
                raise UserError(f"{where.format(number)} is not text but {type(text).__name__} {str(text)[:80]}. "
                                "Every record's text must be a string (null counts as an empty text and is "
                                "skipped, as empty ones are). Fix or drop such records, or choose the column that "
                                "holds the text with --text_column.")
            if text and not text.isspace():
                yield text

    checked = texts_only()
    while batch := list(itertools.islice(checked, batch_size)):
        yield batch


# ----------------------------------------------------------------------------------------------------------------
# Writing shards (prepare_tfrecord_shards.py, here or on Beam's workers through beam_pipeline.py): tokenizing


def load_backend_tokenizer(name_or_path):
    """The 🤗 Tokenizers tokenizer that AutoTokenizer.from_pretrained(name_or_path) wraps, and its vocabulary size
    (added tokens included). A folder of train_unigram.py holds a plain PreTrainedTokenizerFast, which wraps its
    tokenizer.json as it is: loaded directly, it gives the same tokens without importing 🤗 Transformers. Anything
    else (a Hub id, a class that may adjust its tokenizer when it loads) goes through AutoTokenizer."""
    local_path = local_copy(name_or_path)
    tokenizer_file, config_file = (os.path.join(local_path, name) for name in ("tokenizer.json",
                                                                               "tokenizer_config.json"))
    if os.path.isfile(tokenizer_file) and os.path.isfile(config_file):
        with open(config_file, encoding="utf-8") as f:
            config = json.load(f)
        # The settings with which PreTrainedTokenizerFast would change the tokenizer it loads.
        if config.get("tokenizer_class") == "PreTrainedTokenizerFast" and not any(
                config.get(setting) for setting in ("split_special_tokens", "add_prefix_space")):
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(tokenizer_file)
            return tokenizer, tokenizer.get_vocab_size(with_added_tokens=True)
    tokenizer = load_tokenizer(name_or_path, "--tokenizer_name_or_path")
    if not tokenizer.is_fast:
        raise UserError(f"{name_or_path!r} has no fast (🤗 Tokenizers) version; train one with "
                        "train_unigram.py.")
    return tokenizer.backend_tokenizer, len(tokenizer)


# Texts longer than this many characters are tokenized in pieces (see long_text_ids): the encodings of one text
# take some 100 bytes per character, 1.2 GB for a line of 10 MB, where a piece's take a few MB.
MAX_PIECE_CHARS = 16 * 1024
PIECES_PER_CALL = 16  # Tokenized together, on all cores: a few MB of text, as a batch of ordinary lines.


def tokenize(tokenizer, texts):
    """The token ids of a batch of texts, concatenated, tokenized on all cores inside 🤗 Tokenizers (without the
    character offsets of encode_batch, which nothing here uses). Long texts go in pieces: memory is bounded by the
    batch, not by the longest line."""
    ids, short = [], []  # The ids of the texts so far; the short texts since the last long one.
    for text in texts:
        if len(text) > MAX_PIECE_CHARS:
            ids += [encode(tokenizer, short), *long_text_ids(tokenizer, text)]
            short = []
        else:
            short.append(text)
    return np.concatenate([*ids, encode(tokenizer, short)]) if ids else encode(tokenizer, short)


def encode(tokenizer, texts, add_special_tokens=True):
    encodings = tokenizer.encode_batch_fast(texts, add_special_tokens=add_special_tokens)
    return np.fromiter(itertools.chain.from_iterable(encoding.ids for encoding in encodings), np.int64)


def long_text_ids(tokenizer, text):
    """The token ids of a long text, in arrays, tokenized in pieces of about MAX_PIECE_CHARS characters, each cut just
    before a space: a piece then begins as a word does after a space, and the pieces give the tokens of the whole
    text (tests/test_faults.py checks it); a text with no space for MAX_PIECE_CHARS characters is cut there, which may
    split a word's tokens. The special tokens the tokenizer adds around a text (<s> and </s>) go around the whole."""
    word = tokenizer.encode("a", add_special_tokens=False).ids
    wrapped = tokenizer.encode("a").ids
    start = next(i for i in range(len(wrapped)) if wrapped[i:i + len(word)] == word)
    prefix, suffix = wrapped[:start], wrapped[start + len(word):]
    cuts = [0]
    while len(text) - cuts[-1] > MAX_PIECE_CHARS:
        space = text.rfind(" ", cuts[-1] + 1, cuts[-1] + MAX_PIECE_CHARS)
        cuts.append(space if space > 0 else cuts[-1] + MAX_PIECE_CHARS)
    cuts.append(len(text))
    pieces = zip(cuts, cuts[1:])  # (begin, end) of each: a piece's text is copied out only when it is tokenized.
    ids = [np.array(prefix, np.int64)]
    while group := list(itertools.islice(pieces, PIECES_PER_CALL)):
        ids.append(encode(tokenizer, [text[begin:end] for begin, end in group], add_special_tokens=False))
    return [*ids, np.array(suffix, np.int64)]


def in_background(items):
    """The items of the iterator `items`, each computed in a thread while the caller works on the one before: 🤗
    Tokenizers releases Python's lock while it encodes. An error raised by `items` is raised here."""
    with ThreadPoolExecutor(1) as thread:
        future = thread.submit(next, items, None)
        while (item := future.result()) is not None:
            future = thread.submit(next, items, None)
            yield item


# ----------------------------------------------------------------------------------------------------------------
# The records, serialized without TensorFlow: the bytes that tf.io.TFRecordWriter writes for
# tf.train.Example(...).SerializeToString(deterministic=True), in a third of the time (benchmarks/README.md).
#
# Protobuf (https://protobuf.dev/programming-guides/encoding/): every field here is a tag, (field number << 3) | 2,
# then the length of its value as a varint, then the value; a varint is 7 bits per byte, lowest first, the top bit
# set on every byte but the last. The messages (tensorflow/core/example/example.proto and feature.proto):
#
#   Example   { Features features = 1; }
#   Features  { map<string, Feature> feature = 1; }   each entry { string key = 1; Feature value = 2; }, in key order
#   Feature   { Int64List int64_list = 3; ... }
#   Int64List { repeated int64 value = 1 [packed = true]; }   one field holding the varints
#
# TFRecord framing (tensorflow/core/lib/io/record_writer.cc), per record: uint64 length, little-endian; uint32
# masked_crc32c of those 8 bytes; the data; uint32 masked_crc32c of the data.


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
    """Turns samples of token ids into TFRecord-framed tf.train.Example records, as bytes ready to be written: the
    varints of a batch at once with numpy; the bytes around them depend only on their size, computed once each."""

    def __init__(self, max_length):
        self.attention_mask_entry = int64_feature_entry_prefix("attention_mask", max_length) + b"\x01" * max_length
        self.prefixes = {}  # Size of a sample's input_ids varints -> the bytes of its record before them.
        self.length_headers = {}  # Size of a record -> its TFRecord length field and that field's CRC.

    def __call__(self, samples):
        values, sizes = packed_varints(samples)
        records, start = [], 0
        for end in np.cumsum(sizes).tolist():
            record = self.prefix(end - start) + values[start:end]
            records += [self.length_header(len(record)), record, struct.pack("<I", masked_crc32c(record))]
            start = end
        return b"".join(records)

    def prefix(self, values_size):
        if values_size not in self.prefixes:  # Entries in key order: "attention_mask" before "input_ids".
            input_ids_entry = int64_feature_entry_prefix("input_ids", values_size)
            features_size = len(self.attention_mask_entry) + len(input_ids_entry) + values_size
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

    def __init__(self, split_dir, shard_size, max_length, part):
        self.split_dir, self.shard_size, self.part = split_dir, shard_size, part
        self.serialize = RecordSerializer(max_length)
        self.file, self.num_in_file, self.bytes_in_file = None, 0, 0  # The open shard.
        self.shards = []  # {"file", "num_samples", "num_bytes"} of every complete shard, in order.

    def add(self, samples):
        while len(samples):
            if self.file is None:
                self.file = open_file(os.path.join(self.split_dir, f"part-{self.part}-{len(self.shards)}.tfrecord.tmp"),
                                      "wb")
            count = min(len(samples), self.shard_size - self.num_in_file, self.CHUNK_SIZE)
            records = self.serialize(samples[:count])
            self.file.write(records)
            self.num_in_file, self.bytes_in_file, samples = (self.num_in_file + count,
                                                             self.bytes_in_file + len(records), samples[count:])
            if self.num_in_file == self.shard_size:
                self.close()

    def close(self):
        if self.file is not None:
            self.file.close()
            self.shards.append({"file": f"part-{self.part}-{len(self.shards)}.tfrecord.tmp",
                                "num_samples": self.num_in_file, "num_bytes": self.bytes_in_file})
            self.file, self.num_in_file, self.bytes_in_file = None, 0, 0


def write_part(part, batches, tokenizer, vocab_size, split_dir, args, progress):
    """Writes part number `part` of a split: tokenizes its `batches` of texts, concatenates the tokens, cuts them
    every max_length tokens, writes the samples (see ShardWriter) and drops the tokens left at the end. Calls
    progress(texts, samples) after each batch. Returns what finish_split needs."""
    writer = ShardWriter(split_dir, args.shard_size, args.max_length, part)
    leftover = np.zeros(0, dtype=np.int64)  # Tokens that do not fill a sample yet: they begin the next one.
    token_counts = np.zeros(vocab_size, dtype=np.int64)  # Of the tokens written, for run_mlm.py's baseline.
    num_texts = 0
    for batch_texts, tokens in in_background((len(texts), tokenize(tokenizer, texts)) for texts in batches):
        stream = np.concatenate([leftover, tokens])
        num_samples = len(stream) // args.max_length
        samples, leftover = np.split(stream, [num_samples * args.max_length])
        writer.add(samples.reshape(num_samples, args.max_length))
        token_counts += np.bincount(samples, minlength=vocab_size)
        num_texts += batch_texts
        progress(batch_texts, num_samples)
    writer.close()
    return {"shards": writer.shards, "num_texts": num_texts, "dropped_tokens": len(leftover),
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
                        shards=shards)
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
    reading a byte range gives the lines that begin in it (utils.iter_text_file_lines), so the parts, read in
    order, give every line once, whole, in order."""
    file_starts = list(itertools.accumulate(sizes, initial=0))  # Where each file starts in the concatenation.
    total = file_starts.pop()
    cuts = sorted({total * k // num_parts for k in range(num_parts + 1)})
    return [[(path, max(start, first) - first, min(end, first + size) - first)
             for path, first, size in zip(paths, file_starts, sizes) if max(start, first) < min(end, first + size)]
            for start, end in zip(cuts, cuts[1:])]


# ----------------------------------------------------------------------------------------------------------------
# Flags, output folders, tokenizers, configs, saving


def positive_int(text):
    """An argparse type: an integer above 0 ("argument --limit: must be a positive number, got 0")."""
    if int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {int(text)}")
    return int(text)


def fraction(text):
    """An argparse type: a number in [0, 1)."""
    if not 0 <= float(text) < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return float(text)


def probability(text):
    """An argparse type: a number in (0, 1), 0 and 1 excluded (a masking rate)."""
    if not 0 < float(text) < 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), 0 and 1 excluded, got {text}")
    return float(text)


def positive_float(text):
    """An argparse type: a number above 0 (a learning rate). NaN is refused too: no comparison holds for it."""
    if not float(text) > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return float(text)


def non_negative_float(text):
    """An argparse type: a number of 0 or more (a weight decay rate)."""
    if not float(text) >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return float(text)


def non_negative_int(text):
    """An argparse type: an integer of 0 or more (warmup steps)."""
    if int(text) < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {int(text)}")
    return int(text)


def check_output_dir(path, overwrite, resumable=(), stale=()):
    """The output-folder policy of every script. --output_dir may not be a file; a folder that holds anything
    but `resumable` (what the script resumes from) is refused without --overwrite; with it, `stale` (what an
    earlier run left that would mix with this one's: TensorBoard events, checkpoints) is deleted first."""
    refuse_a_file_as_output_dir(path)
    foreign = [name for name in folder_entries(path) if name not in resumable]
    if foreign and not overwrite:
        raise UserError(f"the output folder {path!r} "
                        + ("holds files that are not a checkpoint of this script to resume from" if resumable
                            else "is not empty")
                        + ". Choose another --output_dir, or pass --overwrite to replace what this script writes "
                           "there.")
    for name in stale if overwrite else ():
        delete(os.path.join(path, name))


def refuse_a_file_as_output_dir(path):
    if os.path.isfile(path) or (is_gcs_path(path) and split_gcs_path(path)[1].strip("/")
                                and gcs_blob(path.rstrip("/")).exists()):
        raise UserError(f"--output_dir {path!r} is a file, not a folder. Choose another --output_dir "
                        "(a folder, which is created if it does not exist).")


def load_tokenizer(name_or_path, flag, advice=None):
    """AutoTokenizer.from_pretrained of a local or gs:// folder or a Hub id, named by the option `flag`: the one
    tokenizer loader. A missing folder or an id that cannot be loaded stops with `advice` (default: train one with
    train_unigram.py), instead of 🤗 Hub's errors about repository ids."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id
    from transformers import AutoTokenizer

    advice = advice or (f"Pass the folder written by train_unigram.py (train one with `python train_unigram.py "
                        f"--output_dir {name_or_path}`), or a Hub tokenizer id while online.")
    local_path = local_copy(name_or_path)
    if not os.path.isdir(local_path):
        try:
            validate_repo_id(local_path)
        except HFValidationError:  # A path ("/a/b", "./a", "a/b/c"), which cannot be a Hub id.
            raise UserError(f"the tokenizer folder {name_or_path!r} ({flag}) does not exist. Check the "
                            f"path. {advice}") from None
    try:
        return AutoTokenizer.from_pretrained(local_path)
    except (OSError, ValueError) as err:  # Not on the Hub, offline, or a folder without tokenizer files.
        where = ("the folder holds no tokenizer that AutoTokenizer can load" if os.path.isdir(local_path)
                 else "there is no such local folder, and it could not be loaded from the Hugging Face Hub")
        raise UserError(f"cannot load the tokenizer {name_or_path!r} ({flag}): {where}.\n"
                        f"{type(err).__name__}: {err}\n{advice}") from err


def load_config(name_or_path, flag, advice):
    """AutoConfig.from_pretrained of a local or gs:// folder or file, or a Hub id: the one config loader."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(local_copy(name_or_path))
    except (OSError, ValueError) as err:  # No such folder or id, no config.json, or not a config.
        raise UserError(f"cannot load the model config {name_or_path!r} ({flag}): {err}\n{advice}") from err


# RoBERTa-style models number positions from pad_token_id + 1: they need that many more position embeddings than
# their longest sequence (RoBERTa-base: 514 for 512 tokens).
MODELS_WITH_POSITION_OFFSET = ("roberta", "xlm-roberta", "camembert", "roberta-prelayernorm")


def check_max_length(config, max_length, can_override=False, weights_from=None):
    """Stops when samples of `max_length` tokens need more position embeddings than `config` has; `can_override`:
    the script has --config_overrides; `weights_from`: the model whose weights fix their number."""
    offset = config.pad_token_id + 1 if config.model_type in MODELS_WITH_POSITION_OFFSET else 0
    needed = max_length + offset
    if needed > config.max_position_embeddings:
        raise UserError(
            f"--max_length {max_length} needs {needed} position embeddings, but the model has "
            f"max_position_embeddings={config.max_position_embeddings}, enough for "
            f"{config.max_position_embeddings - offset} tokens. Lower --max_length"
            + (f": the position embeddings of {weights_from!r} are weights, which cannot grow. For a longer second "
               f"phase, build the model with them from the start (--config_overrides "
               f"max_position_embeddings={needed} in the first phase)." if weights_from else
               f", or add max_position_embeddings={needed} to --config_overrides." if can_override else "."))


FULL_DISK_ADVICE = ("What was written of it is deleted: nothing half-saved looks complete. Free space, then run the "
                    "same command again.")


@contextlib.contextmanager
def nothing_half_saved(output_dir, description):
    """Deletes what save_folder had written into `output_dir` when a full disk stopped it: a folder with half a
    model (a config, no weights) would look like a model, and a run could not resume beside it. What was there
    before stays."""
    before = set(folder_entries(output_dir))
    try:
        yield
    except UserError:
        for name in set(folder_entries(output_dir)) - before:
            delete(posixpath.join(output_dir, name) if is_gcs_path(output_dir) else os.path.join(output_dir, name))
        raise


def save_folder(output_dir, write, description, hub_model_id=None, commit_message=None, ignore_patterns=None):
    """Has `write(folder)` write files into a local folder, then puts them in `output_dir` and, with
    `hub_model_id`, on the Hub (less `ignore_patterns`). save_pretrained and the Hub client write and read local
    folders only: for a gs:// `output_dir`, `folder` is a temporary one."""
    local_dir = tempfile.mkdtemp() if is_gcs_path(output_dir) else output_dir
    if local_dir != output_dir:
        atexit.register(shutil.rmtree, local_dir, ignore_errors=True)  # Also when the upload fails.
    with nothing_half_saved(output_dir, description):
        with out_of_space_named(output_dir if local_dir == output_dir else f"{local_dir} (a local copy for "
                                f"{output_dir})", description[0].lower() + description[1:], then=FULL_DISK_ADVICE):
            write(local_dir)
        if local_dir != output_dir:
            with out_of_space_named(output_dir, description[0].lower() + description[1:], then=FULL_DISK_ADVICE):
                upload_folder(local_dir, output_dir)
    logger.info("%s saved to %s", description, output_dir)
    if hub_model_id:
        from huggingface_hub import create_repo, upload_folder as upload_to_hub

        try:
            create_repo(hub_model_id, exist_ok=True)
            url = upload_to_hub(repo_id=hub_model_id, folder_path=local_dir, commit_message=commit_message,
                                ignore_patterns=ignore_patterns)
        except (OSError, ValueError) as err:  # Network, authentication and bad-name errors.
            raise UserError(
                f"pushing to the Hub repository {hub_model_id!r} failed: {err}\nNothing is lost: everything "
                f"is saved in {output_dir!r}. Log in with `huggingface-cli login` (or set HF_TOKEN), then upload "
                f"it with `huggingface-cli upload {hub_model_id} {local_dir}`.") from err
        logger.info("Pushed to %s", url)
    if local_dir != output_dir:
        shutil.rmtree(local_dir)


# The model types that tests/test_architectures.py trains, resumes, fine-tunes and converts exactly (the README's
# table): save_pytorch_copy writes no copy of any other.
ARCHITECTURES = ("albert", "bert", "camembert", "convbert", "deberta", "deberta-v2", "distilbert", "electra", "mpnet",
                 "roberta", "roberta-prelayernorm", "xlm-roberta")

# A model's copy for 🤗 Transformers 5, which has no TensorFlow: a complete model folder inside the TensorFlow one.
# Not beside tf_model.h5: Transformers 4.57's TensorFlow loader prefers any model.safetensors, and fails on these.
PYTORCH_SUBFOLDER = "pytorch"


def save_pytorch_copy(model, tokenizer, folder):
    """Writes into {folder}/pytorch the 🤗 TF `model` as Transformers 5 loads it with PyTorch: config, `tokenizer`,
    float32 weights in a PyTorch-format model.safetensors, named and laid out by Transformers' own TF-to-PyTorch
    mapping, written by safetensors' numpy writer: no PyTorch needed. (TensorFlow's own safetensors keep the TF
    names, which Transformers 5 ignores: it would load random weights.)"""
    import numpy as np
    from safetensors.numpy import save_file
    from transformers.modeling_tf_pytorch_utils import apply_transpose, convert_tf_weight_name_to_pt_weight_name

    if model.config.model_type not in ARCHITECTURES:
        logger.warning("No PyTorch copy: the conversion of %s models is not tested here.", model.config.model_type)
        return
    pytorch_dir = os.path.join(folder, PYTORCH_SUBFOLDER)
    config = copy.deepcopy(model.config)
    config.architectures = [type(model).__name__.removeprefix("TF")]  # RobertaForMaskedLM
    config.save_pretrained(pytorch_dir)
    tokenizer.save_pretrained(pytorch_dir)
    tensors = {}
    for weight in model.weights:
        name, transpose = convert_tf_weight_name_to_pt_weight_name(weight.name, tf_weight_shape=weight.shape)
        if ".pooler." in name and config.model_type == "mpnet":
            continue  # MPNet's TensorFlow models hold a pooler that neither uses; PyTorch's have none.
        value = apply_transpose(transpose, weight.numpy(), pt_to_tf=False)
        if "key_conv_attn_layer." in name and not name.endswith("pointwise.weight"):
            # ConvBERT's separable convolution: PyTorch's keeps these as (channels, 1, kernel) and (channels, 1).
            value = value.reshape(-1, 1, *value.shape[2:])
        tensors[name] = np.ascontiguousarray(value, np.float32)
    save_file(tensors, os.path.join(pytorch_dir, "model.safetensors"), metadata={"format": "pt"})


def load_pretrained_model(model_class, name_or_path, flag, config, new_head=False):
    """`model_class` (a 🤗 TF…For… class) of `config`, with the weights of a local or gs:// model folder or a Hub
    id, named by the option `flag`: TensorFlow's (tf_model.h5) as from_pretrained loads them, else PyTorch's
    (model.safetensors, in one file or sharded with an index): this pipeline's PyTorch copies, most Hub models.
    With `new_head`, the head may be missing from the weights (a classifier made from a masked LM); the encoder
    never."""
    from transformers.utils import cached_file

    local_path = local_copy(name_or_path)
    find = functools.partial(cached_file, local_path, _raise_exceptions_for_missing_entries=False,
                             _raise_exceptions_for_connection_errors=False)
    if find("tf_model.h5") or find("tf_model.h5.index.json"):
        # Not use_safetensors: a model.safetensors beside tf_model.h5 (on the Hub) would take precedence, and fail.
        return model_class.from_pretrained(local_path, config=config, use_safetensors=False)
    index = find("model.safetensors.index.json")
    single = None if index else find("model.safetensors")
    if not index and not single:
        raise UserError(f"{name_or_path!r} ({flag}) holds no weights that TensorFlow can load: no tf_model.h5 and no "
                        "model.safetensors (or model.safetensors.index.json). Pass a folder saved by this pipeline, "
                        "or a model whose weights are in safetensors (PyTorch's pytorch_model.bin needs PyTorch: "
                        "convert it with Transformers and PyTorch, `save_pretrained(folder)`).")
    if index:
        from transformers.utils.hub import get_checkpoint_shard_files

        files = get_checkpoint_shard_files(local_path, index)[0]
    model = model_class.from_config(config)
    model.build_in_name_scope()
    load_pytorch_weights(model, files if index else [single], name_or_path, new_head)
    return model


def load_pytorch_weights(model, files, name_or_path, new_head=False):
    """Loads PyTorch-format safetensors `files` into the built TF `model`, by 🤗 Transformers' own PyTorch-to-TF
    name mapping and transposes, refusing weights that are missing or of another shape. Transformers 4.57's
    from_pretrained hands these files to that loader as open archives, which it iterates as dicts (TypeError:
    'builtins.safe_open' object is not iterable); given numpy arrays, it loads them unchanged, without PyTorch."""
    import tensorflow as tf
    from safetensors.numpy import load_file
    from transformers.modeling_tf_pytorch_utils import load_pytorch_state_dict_in_tf2_model

    state_dict = {}
    for file in files:
        state_dict.update(load_file(file))
    problem = f"the PyTorch weights of {name_or_path!r} do not fit a {type(model).__name__} of their config"
    advice = "Pass a model folder of this architecture, with its head (config.json's \"architectures\")."
    try:
        _, info = load_pytorch_state_dict_in_tf2_model(
            model, state_dict, tf_inputs=False, allow_missing_keys=True, output_loading_info=True,
            skip_logger_warnings=True, tf_to_pt_weight_rename=getattr(model, "tf_to_pt_weight_rename", None))
    except (ValueError, tf.errors.InvalidArgumentError) as err:  # A weight's shape; the message gives both.
        raise UserError(f"{problem}: a weight has another shape ({err}). {advice}") from err
    prefix = model.base_model_prefix + "."
    missing = [name for name in info["missing_keys"] if not new_head or name.startswith(prefix)]
    if missing:
        raise UserError(f"{problem}: {len(missing)} weights are missing ({', '.join(missing[:5])}"
                        f"{', ...' if len(missing) > 5 else ''}). {advice}")
    if info["unexpected_keys"]:
        logger.warning("Weights of %s that a %s does not use, left out: %s", name_or_path, type(model).__name__,
                       ", ".join(sorted(info["unexpected_keys"])[:10]))
    if new_head and info["missing_keys"]:
        logger.info("A new %s head, from random weights: %s", type(model).__name__,
                    ", ".join(info["missing_keys"]))


def write_model_card(folder, output_dir, task, example, description):
    """README.md in `folder`, for the Hub: the model's name (the last part of `output_dir`), `description`, and how
    to run it in the `task` pipeline on `example`, with PyTorch and with TensorFlow."""
    from huggingface_hub import ModelCard, ModelCardData

    name = os.path.basename(output_dir.rstrip("/") if is_gcs_path(output_dir) else os.path.abspath(output_dir))
    data = ModelCardData(library_name="transformers", pipeline_tag=task, tags=["tensorflow", "pytorch"])
    ModelCard(f"""---
{data.to_yaml()}
---

# {name}

{description}

## Use

With 🤗 Transformers 5 and PyTorch, from the folder `{PYTORCH_SUBFOLDER}/` (converted from TensorFlow's weights), or
with Transformers 4.57 and TensorFlow, from `tf_model.h5`:

```python
from transformers import pipeline

pipe = pipeline("{task}", model="PATH_OR_HUB_ID", model_kwargs=dict(subfolder="{PYTORCH_SUBFOLDER}"))  # PyTorch
pipe = pipeline("{task}", model="PATH_OR_HUB_ID", framework="tf", dtype=None)  # TensorFlow
print(pipe("{example}"))
```
""").save(os.path.join(folder, "README.md"))


# ----------------------------------------------------------------------------------------------------------------
# Checkpoints of a run_mlm.py run (run_mlm.py resumes from them, export_model.py exports them)


def last_checkpoint(directory):
    """The last checkpoint that CheckpointManager listed in `directory` (its file "checkpoint") whose files are
    still there; None for none. Deleting a damaged checkpoint's files so makes the one before it the last, where
    tf.train.latest_checkpoint would find none, and a run would silently start over."""
    import tensorflow as tf

    state = tf.train.get_checkpoint_state(directory)
    paths = list(state.all_model_checkpoint_paths) if state else []
    return next((path for path in reversed(paths) if tf.io.gfile.exists(path + ".index")), None)


def check_checkpoint(path, directory):
    """Reads every tensor of the checkpoint `path`; if one cannot be read (a file cut short by a full disk or an
    interrupted copy, a corrupted byte), raises UserError naming it and the last intact checkpoint before it in
    `directory`. Neither script goes back to an earlier step unasked: the user deletes the damaged files, and the
    same command takes the one before (see last_checkpoint). Restoring reads lazily (the optimizer's slots only
    once the first step creates them): a damaged file would otherwise fail deep inside training."""
    error = checkpoint_read_error(path)
    if error is None:
        return
    import tensorflow as tf

    state = tf.train.get_checkpoint_state(directory)
    earlier = [other for other in (state.all_model_checkpoint_paths if state else []) if other != path]
    intact = next((other for other in reversed(earlier)
                   if tf.io.gfile.exists(other + ".index") and checkpoint_read_error(other) is None), None)
    from diagnostics import damaged_checkpoint_message

    raise UserError(damaged_checkpoint_message(path, error, intact))


def checkpoint_read_error(path):
    """Why the checkpoint `path` cannot be read whole, or None."""
    import tensorflow as tf

    try:
        reader = tf.train.load_checkpoint(path)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except (tf.errors.OpError, IndexError, ValueError) as error:  # IndexError: "Read less bytes than requested".
        return error
    return None


# ----------------------------------------------------------------------------------------------------------------
# Hardware (run_mlm.py and run_classification.py)


def add_hardware_arguments(parser):
    """The hardware flags of the two training scripts, as an argparse group."""
    hardware = parser.add_argument_group("hardware")
    hardware.add_argument("--tpu_name",
                          help="TPU to use: `local` on a TPU VM; a TPU Node's or a pod slice's name, from a machine "
                               "that is not the TPU host. Default: `local` when this machine has TPU chips, else "
                               "GPUs or the CPU. A TPU named here must be found, or the script stops.")
    hardware.add_argument("--tpu_zone", help="Zone of the TPU named by --tpu_name (TPU Nodes and pod slices).")
    hardware.add_argument("--gcp_project", help="Google Cloud project of that TPU (TPU Nodes and pod slices).")
    hardware.add_argument("--no_tpu", action="store_true",
                          help="Do not use a TPU even if this machine has one: use GPUs or the CPU.")
    hardware.add_argument("--num_cpu_replicas", type=positive_int, default=1,
                          help="On a machine without GPUs, split the CPU into this many devices and train one "
                               "replica on each: a dry run of multi-replica training (default: %(default)s).")
    hardware.add_argument("--steps_per_execution", type=positive_int, default=1,
                          help="Steps run per call from Python into the device; larger values cut the per-step "
                               "overhead, mostly on TPUs (default: %(default)s).")
    hardware.add_argument("--bfloat16", action="store_true",
                          help="Mixed precision: compute in bfloat16, keep weights in float32. Fast on TPUs and "
                               "recent GPUs (A100, H100); slow on CPUs.")
    # Both spellings of the negative flag: argparse's BooleanOptionalAction would only accept --no-jit_compile.
    hardware.add_argument("--jit_compile", action="store_true", default=None,
                          help="Compile each replica's forward and backward pass with XLA. Default: on with GPUs, "
                               "off on a CPU, where XLA measured slower for these models (benchmarks/README.md); "
                               "pass it there to rehearse a TPU's compilation. TPUs compile everything with XLA, "
                               "whatever the flag.")
    hardware.add_argument("--no_jit_compile", "--no-jit_compile", dest="jit_compile", action="store_false",
                          help="Run the forward and backward pass without XLA, on GPUs too.")


# Every TPU chip is a PCI device of Google's vendor id, its device id naming the generation (v2 and v3 share one,
# told apart by the subsystem id): the ids that Google's tpu-info tool reads.
GOOGLE_PCI_VENDOR_ID = "0x1ae0"
TPU_GENERATIONS = {("0x0027", "0x004e"): "v2", ("0x0027", "0x004f"): "v3", "0x005e": "v4", "0x0062": "v5p",
                   "0x0063": "v5e", "0x006f": "v6e", "0x0076": "7x"}


def local_tpu_chips(root="/"):
    """This machine's TPU chips by generation, e.g. {"v4": 4}, read from the PCI devices in sysfs as JAX and
    tpu-info do: this works without any TPU software. /dev/accel* files count as chips of unknown generation when
    sysfs shows none. `root` lets tests point at a fake tree."""
    chips = {}
    for device in glob.glob(os.path.join(root, "sys/bus/pci/devices/*")):
        ids = {}
        for name in ("vendor", "device", "subsystem_device"):
            with contextlib.suppress(OSError), open(os.path.join(device, name)) as f:
                ids[name] = f.read().strip()
        generation = ids.get("vendor") == GOOGLE_PCI_VENDOR_ID and (
            TPU_GENERATIONS.get((ids.get("device"), ids.get("subsystem_device")))
            or TPU_GENERATIONS.get(ids.get("device")))
        if generation:  # Google's other PCI devices (its network cards) are not TPUs.
            chips[generation] = chips.get(generation, 0) + 1
    accel_files = glob.glob(os.path.join(root, "dev/accel[0-9]*"))
    return chips or ({"unknown generation": len(accel_files)} if accel_files else {})


def choose_strategy(args, root="/"):
    """The tf.distribute strategy for this machine, and whether it is a TPU one. Call it before any TensorFlow op:
    the CPU is split into --num_cpu_replicas devices first, and MultiWorkerMirroredStrategy sets up its collective
    ops at start-up. A machine with TPU chips never falls back to its CPU silently: if TensorFlow cannot use them,
    the script stops and says why. `root` lets tests point at a fake sysfs."""
    import tensorflow as tf

    if args.num_cpu_replicas > 1 and not tf.config.list_physical_devices("GPU"):
        tf.config.set_logical_device_configuration(tf.config.list_physical_devices("CPU")[0],
                                                   [tf.config.LogicalDeviceConfiguration()] * args.num_cpu_replicas)
    chips = {} if args.no_tpu else local_tpu_chips(root)
    tpu_name = args.tpu_name or ("local" if chips else None)
    if tpu_name:
        try:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
                tpu_name, zone=args.tpu_zone, project=args.gcp_project)
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
            return tf.distribute.TPUStrategy(resolver), True
        except Exception as err:  # Each TPU set-up failure has its own type; all mean "this TPU is not usable".
            from diagnostics import explain_tpu_error

            raise UserError(explain_tpu_error(tpu_name, chips, err, root)) from err
    if "TF_CONFIG" in os.environ:
        return tf.distribute.MultiWorkerMirroredStrategy(), False
    devices = [device.name for device in tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")]
    if len(devices) == 1:
        # TensorFlow's default strategy: the code path of the others (scope, distributed datasets, replica context,
        # all-reduce) without their machinery. OneDeviceStrategy and MirroredStrategy feed each device through an
        # iterator of their own whose pipeline always autotunes: deleting it, at the end of every fit call, waited
        # up to a minute for its tuning thread (benchmarks/README.md, "The end of a fit call").
        return tf.distribute.get_strategy(), False
    return tf.distribute.MirroredStrategy(devices), False


def set_up_training(args, input_paths):
    """What both training scripts do first, in this order; returns (strategy, on_tpu, jit_compile). The gs://
    paths first: a missing bucket must not wait for a TPU to start. Then the strategy, before any TensorFlow op;
    then the seeds and the precision, before any model is built."""
    import tf_keras as keras

    for path in input_paths:
        if path:
            check_gcs_path(path)
    check_gcs_path(args.output_dir, write=True)
    strategy, on_tpu = choose_strategy(args)
    set_seed(args.seed)
    if args.bfloat16:
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    return strategy, on_tpu, use_jit_compile(args, on_tpu)


def set_seed(seed):
    """Seeds Python, NumPy and TensorFlow: keras.utils.set_random_seed less the seed generator it installs, which
    draws with random.randint(1, 1e9), a float bound that Python 3.12 refuses. Without it, tf-keras draws its
    layers' seeds from Python's own generator, seeded here all the same."""
    import numpy as np
    import tensorflow as tf

    random.seed(seed)
    np.random.seed(seed)
    tf.random.set_seed(seed)


def create_optimizer_state(optimizer, variables):
    """Creates the optimizer's state for `variables` (Adam's moments) now, as Keras would in the first training step,
    where creating variables makes TensorFlow trace the step twice (seconds per run). 🤗's AdamWeightDecay is a
    legacy Keras optimizer, the Adam of a weight decay of 0 a current one: each has its own method."""
    (getattr(optimizer, "_create_all_weights", None) or optimizer.build)(variables)


def use_jit_compile(args, on_tpu):
    """Whether to XLA-compile each replica's forward and backward pass: as --jit_compile says, else on with GPUs
    (where XLA's fused kernels pay) and off on a CPU (where they measured slower). A TPU compiles the whole step
    with XLA anyway."""
    import tensorflow as tf

    if on_tpu:
        return False
    return args.jit_compile if args.jit_compile is not None else bool(tf.config.list_logical_devices("GPU"))


def count_hosts(strategy):
    """Machines whose CPUs run an input pipeline of their own: the hosts of a TPU (one for a TPU VM, all of a pod
    slice's), or the workers of a multi-worker cluster."""
    import tensorflow as tf

    if isinstance(strategy, tf.distribute.TPUStrategy):
        return strategy.extended.num_hosts
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return len(host_addresses(strategy))
    return 1


def host_addresses(strategy):
    """The addresses of a multi-host strategy's hosts, as its cluster resolver gives them ([] for none)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    cluster = resolver.cluster_spec().as_dict() if resolver is not None else {}
    return [*cluster.get("chief", []), *cluster.get("worker", [])]


def strategy_name(strategy):
    # The public names of the classes that TensorFlow calls CollectiveAllReduceStrategy and
    # _DefaultDistributionStrategy.
    name = type(strategy).__name__
    return {"CollectiveAllReduceStrategy": "MultiWorkerMirroredStrategy",
            "_DefaultDistributionStrategy": "the default strategy"}.get(name, name)


if __name__ == "__main__":
    from diagnostics import main  # `python utils.py check-tpu`, as the README and the Makefile say.

    main(local_tpu_chips())
