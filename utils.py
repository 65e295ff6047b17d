"""What the scripts share, and nothing else:

- the shard contract between prepare_tfrecord_shards.py and run_mlm.py;
- Google Cloud Storage: checking a gs:// path before any long work, and copying from and to gs:// what 🤗
  libraries read or write on local disk only (tokenizers, configs, saved models);
- reading a text corpus, streamed, from the Hub or from text, JSON-lines or Parquet files (train_unigram.py and
  prepare_tfrecord_shards.py);
- output folders, tokenizers and the Hub; the PyTorch copy of a saved model, and how a model card says to load it;
- the models and hardware of the training scripts: their hardware flags, the tf.distribute strategy, and the TPU
  chips found in sysfs (whether the installed TensorFlow can drive them is diagnostics.py's: `python utils.py
  check-tpu` on a TPU VM).

TensorFlow reads and writes gs:// paths itself (tf.io.gfile, TFRecord files, checkpoints); everything else here
goes through the google-cloud-storage client, which is light to import. Both use Application Default Credentials.
"""

import atexit
import copy
import dataclasses
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
import tempfile
import uuid

logger = logging.getLogger("utils")

# ----------------------------------------------------------------------------------------------------------------
# The shard contract: what prepare_tfrecord_shards.py writes into each split folder, and run_mlm.py reads.
#
#   INCOMPLETE                               written first, deleted once the manifest is written
#   dataset-{index}-{num_samples}.tfrecord   the samples, as tf.train.Example records
#   token_counts.json                        how many times each token id occurs in the samples, a JSON list
#   manifest.json                            written last, once every shard is complete: a Manifest

# Shards are named as in the original Transformers TPU example, so that shards made by it keep working:
# the second number is how many samples (tf.train.Example records) the file holds.
SHARD_NAME = "dataset-{index}-{num_samples}.tfrecord"
SHARD_NAME_PATTERN = re.compile(r"dataset-(\d+)-(\d+)\.tfrecord$")
# Each record holds these two int64 features, each a list of exactly max_length values.
INPUT_IDS = "input_ids"  # The token ids of one sample.
ATTENTION_MASK = "attention_mask"  # All ones (samples are never padded): kept for readers of the original format.
MANIFEST_NAME = "manifest.json"
# The shortest sample worth masking. Samples are cut from a stream in which each document is wrapped in <s> ... </s>,
# so two of a sample's tokens may be a document bound, never masked; at 15 % masking, one sample of 16 tokens in ten
# still draws no masked token (0.85 ** 14), and shorter ones leave a masked token almost no context.
MIN_MAX_LENGTH = 16
# run_mlm.py scores its model against the best constant predictor, a table of the training tokens' frequencies.
TOKEN_COUNTS_NAME = "token_counts.json"
# A folder that still has this file was left by an interrupted run, and holds only part of the split.
INCOMPLETE_MARKER_NAME = "INCOMPLETE"


@dataclasses.dataclass
class Manifest:
    """manifest.json of a split folder. The first three fields are those run_mlm.py needs; manifests of older
    versions of prepare_tfrecord_shards.py may lack the others."""
    max_length: int
    vocab_size: int
    # For each shard, in order: {"file": its name, "num_samples": N, "num_bytes": its size}. run_mlm.py compares
    # the size with the file's, so that a truncated copy is found early; older manifests give no size.
    shards: list
    split: str | None = None
    num_samples: int | None = None
    num_tokens: int | None = None
    dropped_tokens: int | None = None  # Tokens at the ends of the parts that did not fill a sample.
    num_parts: int | None = None  # Parts of the split written side by side (processes or Beam workers).
    num_texts: int | None = None
    tokenizer: str | None = None  # What --tokenizer_name_or_path named.
    vocabulary_fingerprint: str | None = None  # See vocabulary_fingerprint: run_mlm.py compares it with its own.

    def to_json(self):
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_json(cls, data, path):
        """The manifest in `data` (the bytes of the file at `path`), or SystemExit saying what is wrong with it
        (see diagnostics.manifest_error)."""
        try:
            fields = json.loads(data)
            complete = all(isinstance(shard, dict) and name in shard for shard in fields["shards"]
                           for name in ("file", "num_samples"))
            manifest = cls(**{field.name: fields[field.name] for field in dataclasses.fields(cls)
                              if field.name in fields})
        except (ValueError, TypeError, KeyError):  # Not JSON, not an object, a field missing.
            complete = False
        if complete:
            return manifest
        from diagnostics import manifest_error  # What is wrong, loaded only once something is.

        error = manifest_error(cls, data, path)
        if error is not None:
            raise error
        known = {field.name for field in dataclasses.fields(cls)}
        return cls(**{name: value for name, value in fields.items() if name in known})


def vocabulary_fingerprint(tokenizer):
    """A hash of a 🤗 Tokenizers tokenizer's vocabulary, every token with its id (added tokens included): shards
    and model must agree on what every id means. A Tokenizer loaded from tokenizer.json and the backend_tokenizer
    of the same folder's AutoTokenizer give the same value."""
    pairs = sorted(tokenizer.get_vocab(with_added_tokens=True).items(), key=lambda pair: pair[1])
    return hashlib.sha256(json.dumps(pairs, ensure_ascii=False).encode()).hexdigest()


# ----------------------------------------------------------------------------------------------------------------
# Google Cloud Storage


def is_gcs_path(path):
    return str(path).startswith("gs://")


def split_gcs_path(path):
    """("bucket", "folder/name") for "gs://bucket/folder/name"."""
    bucket, _, name = path[len("gs://"):].partition("/")
    return bucket, name


def folder_prefix(name):
    """The prefix that the objects in the folder `name` of a bucket start with: "a/b/" for "a/b", "" for the root."""
    return name.rstrip("/") + "/" if name.rstrip("/") else ""


@functools.cache
def gcs_client():
    """A google-cloud-storage client with Application Default Credentials (see diagnostics.CREDENTIALS_ADVICE)."""
    from google.cloud import storage

    return storage.Client()


def check_gcs_path(path, *, write=False):
    """Fails at once, saying what to do, when the gs:// `path` cannot be read (or, with `write`, written): no
    credentials, no such bucket, no permission. Local paths pass unchecked.

    Called before any long work, so that hours of work never end in a failed first write (and because
    TensorFlow's makedirs never returns for a missing bucket). Writing needs permission to create and delete
    objects too (a shard is published by renaming it: a copy, then a delete), checked with a probe object.
    """
    if not is_gcs_path(path):
        return
    bucket, name = split_gcs_path(path)
    prefix = re.split(r"[*?[]", name, maxsplit=1)[0]  # A glob (gs://bucket/train/*.tfrecord) up to its wildcard.
    try:
        client = gcs_client()
        next(iter(client.list_blobs(bucket, prefix=prefix, max_results=1)), None)
        if write:
            probe = client.bucket(bucket).blob(posixpath.join(prefix, f".write-check-{uuid.uuid4().hex}"))
            probe.upload_from_string(b"")
            probe.delete()
    except Exception as err:
        from diagnostics import explain_gcs_error  # The advice, loaded only when access failed.

        explanation = explain_gcs_error(path, bucket, err, write=write)
        if explanation is None:
            raise
        raise explanation from err


def local_copy(path):
    """A path that 🤗 libraries can read: `path` itself when it is local (or a Hub id); for a gs:// file or folder,
    a copy in a new local temporary folder, deleted when the script exits."""
    if not is_gcs_path(path):
        return path
    bucket_name, name = split_gcs_path(path)
    bucket = gcs_client().bucket(bucket_name)
    local_dir = tempfile.mkdtemp(prefix="from-gcs-")
    atexit.register(shutil.rmtree, local_dir, ignore_errors=True)
    single_file = bucket.get_blob(name) if name and not name.endswith("/") else None
    if single_file is not None:
        local_path = os.path.join(local_dir, posixpath.basename(name))
        single_file.download_to_filename(local_path)
        return local_path
    prefix = folder_prefix(name)
    files = [blob for blob in bucket.list_blobs(prefix=prefix, delimiter="/") if not blob.name.endswith("/")]
    if not files:
        raise SystemExit(f"error: there is no file at {path!r}.")
    for blob in files:
        blob.download_to_filename(os.path.join(local_dir, blob.name[len(prefix):]))
    return local_dir


def upload_to_gcs(local_dir, path):
    """Copies the files of a local folder (sub-folders included) to the gs:// folder `path`, replacing any that
    are there."""
    bucket_name, name = split_gcs_path(path)
    bucket = gcs_client().bucket(bucket_name)
    for root, _, files in os.walk(local_dir):
        for file in files:
            local_path = os.path.join(root, file)
            relative = os.path.relpath(local_path, local_dir).replace(os.sep, "/")
            bucket.blob(posixpath.join(name, relative)).upload_from_filename(local_path)


# ----------------------------------------------------------------------------------------------------------------
# Reading a text corpus (train_unigram.py and prepare_tfrecord_shards.py)

# Which 🤗 Datasets builder reads a local file, by its extension.
FILE_BUILDERS = {".txt": "text", ".text": "text", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}


def file_builder(path):
    """The 🤗 Datasets builder that reads the file `path`, by its extension ("text", "json", "parquet"); None for
    an unknown one. The one format detection of the scripts and of beam_pipeline.py."""
    return FILE_BUILDERS.get(os.path.splitext(path)[1].lower())


def open_binary(path, chunk_size=None):
    """Opens a local or gs:// file for reading bytes; a gs:// file is downloaded `chunk_size` bytes at a time
    (default: google-cloud-storage's, 40 MiB)."""
    if is_gcs_path(path):
        bucket, name = split_gcs_path(path)
        return gcs_client().bucket(bucket).blob(name).open("rb", chunk_size=chunk_size)
    return open(path, "rb")


def open_text(path, start=0, end=None):
    """Opens a local or gs:// text file for reading, lines split at "\\n", "\\r\\n" or "\\r" (Python's universal
    newlines); gs:// files are streamed by google-cloud-storage, since TensorFlow's GFile splits at "\\n" only.

    With `start` or `end` (None: the end of the file), only the whole lines that begin at a byte position in
    [start, end): consecutive byte ranges, wherever cut, give each line of the file once (prepare_tfrecord_shards.py
    cuts files into parts so).
    """
    if not start and end is None:
        return io.TextIOWrapper(open_binary(path), encoding="utf-8")
    # A line begins at 0 and after each "\n". With a small download size for the probes of a gs:// file.
    with open_binary(path, chunk_size=2**16) as probe:
        start, end = (position if position in (0, None) else next_line_start(probe, position)
                      for position in (start, end))
    return io.TextIOWrapper(io.BufferedReader(ByteRange(open_binary(path), start, end)), encoding="utf-8")


def next_line_start(file, position):
    """The first byte position at or after `position` where a line of the open binary `file` begins, or its size."""
    file.seek(position - 1)
    return position - 1 + len(file.readline())  # The byte before `position`, up to and with the next "\n".


class ByteRange(io.RawIOBase):
    """Bytes `start` to `end` (None: to the end) of an open binary file, read as a file of their own."""

    def __init__(self, file, start, end):
        super().__init__()
        file.seek(start)
        self.file = file
        self.remaining = float("inf") if end is None else end - start

    def readable(self):
        return True

    def readinto(self, buffer):
        data = self.file.read(min(len(buffer), self.remaining))
        buffer[:len(data)] = data
        self.remaining -= len(data)
        return len(data)

    def close(self):
        self.file.close()
        super().close()


def load_text_splits(*, data_files=None, dataset_name=None, dataset_config=None, splits=None,
                     trust_remote_code=False):
    """{split: a streamed 🤗 `IterableDataset`} of `data_files` ({split: [paths]}: local text, JSON-lines or
    Parquet files) or of the Hub dataset `dataset_name` (`splits`: the names of those to open, None for all).
    Streaming keeps memory flat whatever the corpus size, and copies no local file into a cache first.
    """
    import datasets  # Imported here: run_mlm.py never needs it.

    if data_files:
        return datasets.load_dataset(data_files_format(data_files), data_files=data_files, streaming=True)

    from diagnostics import check_hub_reachable

    check_hub_reachable(dataset_name)
    try:
        corpus = datasets.load_dataset(dataset_name, dataset_config, streaming=True,
                                       trust_remote_code=trust_remote_code)
    except (ConnectionError, FileNotFoundError, ValueError) as err:
        raise SystemExit(
            f"error: could not load the dataset {dataset_name!r} (config {dataset_config!r}) from the Hub: {err}\n"
            "Check the name and config, or pass local files instead (--train_file ...).") from err
    if splits:
        missing = [split for split in splits if split not in corpus]
        if missing:
            raise SystemExit(f"error: the dataset {dataset_name!r} has no split {missing}; "
                             f"it has {sorted(corpus)}.")
        corpus = {split: corpus[split] for split in splits}
    return dict(corpus)


def add_corpus_arguments(group):
    """The flags of text_batches that train_unigram.py and prepare_tfrecord_shards.py share, added to an argparse
    group; each script adds its own --split and file flags."""
    group.add_argument("--dataset_name", default="Salesforce/wikitext",
                       help="Dataset on the Hugging Face Hub (default: %(default)s).")
    group.add_argument("--dataset_config", default="wikitext-103-raw-v1",
                       help="Configuration of the Hub dataset (default: %(default)s).")
    group.add_argument("--text_column", default="text",
                       help="Column holding the text, for Hub datasets and JSON/Parquet files (default: %(default)s).")
    group.add_argument("--limit", type=int,
                       help="Read only the first LIMIT records of each split, for a quick run (default: all).")
    group.add_argument("--trust_remote_code", action="store_true",
                       help="Allow a Hub dataset to run its own loading script. Off by default: only turn it on "
                            "for datasets whose code you trust.")


def text_batches(*, text_column, batch_size, limit=None, data_files=None, **hub_dataset):
    """{split: iterator of lists of up to `batch_size` texts}, empty and whitespace-only texts left out; `limit`
    caps the records read from each split. Text files (`data_files`, local or gs://) are read directly, faster
    than through 🤗 Datasets; anything else (`hub_dataset`: the other arguments of load_text_splits) through it.
    """
    if data_files and data_files_format(data_files) == "text":
        if text_column != "text":  # As 🤗 Datasets' "text" builder, which names its only column "text".
            raise SystemExit(f"error: the data has no column {text_column!r}; its columns are ['text']. "
                             "Choose one with --text_column.")
        return {split: iter_text_file_batches(paths, batch_size, limit) for split, paths in data_files.items()}
    corpus = load_text_splits(data_files=data_files, **hub_dataset)
    return {split: iter_text_batches(dataset, text_column, batch_size, limit) for split, dataset in corpus.items()}


def data_files_format(data_files):
    """The 🤗 Datasets builder ("text", "json" or "parquet") that reads every file of `data_files` ({split: [paths]});
    SystemExit for a missing file, an unknown extension or a mix of formats."""
    builders = set()
    for split, paths in data_files.items():
        for path in paths:
            builder = file_builder(path)
            if builder is None:
                raise SystemExit(
                    f"error: cannot read {path!r}: unknown extension {os.path.splitext(path)[1].lower()!r}. "
                    f"Use text ({', '.join(e for e, b in FILE_BUILDERS.items() if b == 'text')}), "
                    f"JSON lines (.json, .jsonl) or Parquet (.parquet) files.")
            if is_gcs_path(path) and builder != "text":
                raise SystemExit(
                    f"error: cannot read {path!r}: JSON-lines and Parquet files are read from local disk only. Copy "
                    "them first (`gcloud storage cp`), or use text files, which are read from gs:// directly.")
            if is_gcs_path(path):
                bucket, name = split_gcs_path(path)
                exists = gcs_client().bucket(bucket).blob(name).exists()
            else:
                exists = os.path.isfile(path)
            if not exists:
                raise SystemExit(f"error: the {split} file {path!r} does not exist.")
            builders.add(builder)
    if len(builders) > 1:
        raise SystemExit(f"error: all input files must have one format, got a mix of {sorted(builders)}.")
    return builders.pop()


def iter_text_batches(dataset, text_column, batch_size, limit=None):
    """Yields lists of up to `batch_size` texts from `dataset`, leaving out empty and whitespace-only texts;
    `limit` caps the records read (before empty ones are left out)."""
    if text_column not in (dataset.column_names or [text_column]):
        raise SystemExit(f"error: the data has no column {text_column!r}; its columns are "
                         f"{dataset.column_names}. Choose one with --text_column.")
    if limit is not None:
        dataset = dataset.take(limit)
    for batch in dataset.iter(batch_size=batch_size):
        texts = [text for text in batch[text_column] if text and not text.isspace()]
        if texts:
            yield texts


def iter_text_file_batches(files, batch_size, limit=None):
    """iter_text_batches for text files: the same texts as 🤗 Datasets' "text" builder gives, read at disk speed.
    Each item of `files` is a local or gs:// path, or a (path, start, end) byte range as open_text takes it."""
    return batches_of_texts(itertools.islice(iter_text_file_lines(files), limit), batch_size)


def iter_text_file_lines(files):
    """The lines of text files (paths, or (path, start, end) byte ranges, as open_text takes them), without their
    line breaks. Invalid UTF-8 raises SystemExit, saying where it is and what to do."""
    for file in files:
        path, start, end = (file, 0, None) if isinstance(file, (str, os.PathLike)) else file
        with open_text(path, start, end) as f:
            try:
                for line in f:
                    yield line.rstrip("\n")
            except UnicodeDecodeError as err:
                from diagnostics import not_utf8_error

                raise SystemExit(not_utf8_error(path)) from err


def batches_of_texts(texts, batch_size):
    """Yields the texts of an iterable in lists of up to `batch_size`, leaving out empty and whitespace-only ones
    (and None, a missing value in a table)."""
    batch = []
    for text in texts:
        if text and not text.isspace():
            batch.append(text)
            if len(batch) == batch_size:
                yield batch
                batch = []
    if batch:
        yield batch


# ----------------------------------------------------------------------------------------------------------------
# Output folders, tokenizers and the Hub


def check_output_dir(path, overwrite):
    """Refuses to write into a folder that already holds files, unless the user said `overwrite`; refuses a file.
    The output-folder policy of every script; run_mlm.py lets a folder hold a run it resumes (see
    TrainingRun.prepare_output_dir), and clears an earlier run's state with clear_run_state, as run_classification.py
    does."""
    refuse_a_file(path)
    if is_gcs_path(path):
        bucket, name = split_gcs_path(path)
        is_empty = next(iter(gcs_client().list_blobs(bucket, prefix=folder_prefix(name), max_results=1)),
                        None) is None
    else:
        is_empty = not os.path.exists(path) or not os.listdir(path)
    if not is_empty and not overwrite:
        raise SystemExit(f"error: the output folder {path!r} is not empty. Choose another --output_dir, "
                         "or pass --overwrite to replace what this run writes there.")


def refuse_a_file(path):
    """Stops when the --output_dir `path` (local or gs://) is a file."""
    if is_gcs_path(path):
        bucket, name = split_gcs_path(path)
        is_file = bool(name.rstrip("/")) and gcs_client().bucket(bucket).blob(name.rstrip("/")).exists()
    else:
        is_file = os.path.exists(path) and not os.path.isdir(path)
    if is_file:
        raise SystemExit(f"error: --output_dir {path!r} is a file, not a folder. Choose another --output_dir "
                         "(a folder, which is created if it does not exist).")


def clear_run_state(path, names):
    """Deletes the files and folders `names` of the output folder `path` (local or gs://), left by an earlier run:
    TensorBoard adds event files to what is there, and a checkpoint would be resumed."""
    import tensorflow as tf

    for name in names:
        entry = os.path.join(path, name)
        if tf.io.gfile.isdir(entry):
            tf.io.gfile.rmtree(entry)
        elif tf.io.gfile.exists(entry):
            tf.io.gfile.remove(entry)


def load_auto_tokenizer(local_path, name_or_path, flag):
    """`AutoTokenizer.from_pretrained(local_path)`, where `local_path` is `name_or_path` or its local copy (see
    local_copy), and `flag` the option that named it; a missing folder or an id that cannot be loaded raises
    SystemExit saying which, instead of 🤗 Hub's errors about repository ids."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id
    from transformers import AutoTokenizer

    if not os.path.isdir(local_path):
        try:
            validate_repo_id(local_path)
        except HFValidationError:  # A path ("/a/b", "./a", "a/b/c"), which cannot be a Hub id.
            raise SystemExit(
                f"error: the tokenizer folder {name_or_path!r} ({flag}) does not exist. Check the path, or train "
                f"a tokenizer there with `python train_unigram.py --output_dir {name_or_path}`.") from None
    try:
        return AutoTokenizer.from_pretrained(local_path)
    except (OSError, ValueError) as err:  # Not found on the Hub, offline, or a folder without tokenizer files.
        where = ("the folder holds no tokenizer that AutoTokenizer can load" if os.path.isdir(local_path)
                 else "there is no such local folder, and it could not be loaded from the Hugging Face Hub")
        raise SystemExit(
            f"error: cannot load the tokenizer {name_or_path!r} ({flag}): {where}.\n{type(err).__name__}: {err}\n"
            f"Pass the folder written by train_unigram.py (train one with `python train_unigram.py --output_dir "
            f"{name_or_path}`), or a Hub tokenizer id while online.") from err


def push_folder_to_hub(folder, repo_id, commit_message, ignore_patterns=None):
    """Uploads a saved folder (but files matching `ignore_patterns`) to the Hub repository `repo_id`, created if needed.
    The folder is saved before, so a failed push loses nothing: the error says how to retry by hand."""
    from huggingface_hub import create_repo, upload_folder

    try:
        create_repo(repo_id, exist_ok=True)
        url = upload_folder(repo_id=repo_id, folder_path=folder, commit_message=commit_message,
                            ignore_patterns=ignore_patterns)
    except (OSError, ValueError) as err:  # Network, authentication and bad-name errors.
        raise SystemExit(
            f"error: pushing to the Hub repository {repo_id!r} failed: {err}\n"
            f"Nothing is lost: everything is saved in {folder!r}. Log in with `huggingface-cli login` "
            f"(or set HF_TOKEN), then upload it with `huggingface-cli upload {repo_id} {folder}`.") from err
    return url


def save_final_folder(output_dir, write, description, hub_model_id=None, commit_message=None,
                      ignore_patterns=None):
    """Has `write(folder)` write the final files into a local folder, then puts them in `output_dir` and, with
    `hub_model_id`, on the Hub (but files matching `ignore_patterns`). save_pretrained and the Hub client work on
    local folders only: for a gs:// `output_dir`, `folder` is a temporary one, deleted once uploaded and pushed."""
    local_dir = tempfile.mkdtemp() if is_gcs_path(output_dir) else output_dir
    write(local_dir)
    if local_dir != output_dir:
        upload_to_gcs(local_dir, output_dir)
    logger.info("%s saved to %s", description, output_dir)
    if hub_model_id:
        url = push_folder_to_hub(local_dir, hub_model_id, commit_message, ignore_patterns)
        logger.info("Pushed to %s", url)
    if local_dir != output_dir:
        shutil.rmtree(local_dir)


# The PyTorch copy of a saved model: a complete model folder (config, tokenizer, weights) inside the TensorFlow one,
# for 🤗 Transformers 5, which has no TensorFlow. Not beside tf_model.h5: Transformers 4.57's TensorFlow loader
# prefers a model.safetensors (or a sharded model.safetensors.index.json) to tf_model.h5, and fails on PyTorch ones.
PYTORCH_SUBFOLDER = "pytorch"


def save_pytorch_copy(model, tokenizer, folder):
    """Writes into {folder}/pytorch a copy of the 🤗 TF model `model` that Transformers 5 loads with PyTorch: its
    config, `tokenizer`, and its weights in float32 (whatever the training precision) as a PyTorch-format
    model.safetensors. Transformers' own TF-to-PyTorch name mapping gives each weight its PyTorch name and layout;
    safetensors' numpy writer needs no PyTorch. (TensorFlow's save_pretrained(safe_serialization=True) would keep
    the TF names, which Transformers 5 ignores: it would load a randomly initialised model.)"""
    import numpy as np
    from safetensors.numpy import save_file
    from transformers.modeling_tf_pytorch_utils import apply_transpose, convert_tf_weight_name_to_pt_weight_name

    pytorch_dir = os.path.join(folder, PYTORCH_SUBFOLDER)
    config = copy.deepcopy(model.config)
    config.architectures = [type(model).__name__.removeprefix("TF")]  # The PyTorch class: RobertaForMaskedLM.
    config.save_pretrained(pytorch_dir)
    tokenizer.save_pretrained(pytorch_dir)
    tensors = {}
    for weight in model.weights:
        name, transpose = convert_tf_weight_name_to_pt_weight_name(weight.name, tf_weight_shape=weight.shape)
        tensors[name] = np.ascontiguousarray(apply_transpose(transpose, weight.numpy(), pt_to_tf=False),
                                             dtype=np.float32)
    save_file(tensors, os.path.join(pytorch_dir, "model.safetensors"), metadata={"format": "pt"})


def model_name(output_dir):
    """The name a model card gives the model: the last part of its --output_dir, even when the card is written to a
    local copy of a gs:// folder."""
    return os.path.basename(output_dir.rstrip("/") if is_gcs_path(output_dir) else os.path.abspath(output_dir))


def model_card_usage(task, example):
    """The "Use" section of a model card: the `task` pipeline on `example`, with PyTorch and with TensorFlow."""
    return f"""## Use

With 🤗 Transformers 5 and PyTorch, from the folder `{PYTORCH_SUBFOLDER}/` (a copy converted from TensorFlow's):

```python
from transformers import pipeline

pipe = pipeline("{task}", model="PATH_OR_HUB_ID", model_kwargs=dict(subfolder="{PYTORCH_SUBFOLDER}"))
print(pipe("{example}"))
```

With 🤗 Transformers 4.57 and TensorFlow (`tf_model.h5`):

```python
from transformers import pipeline

pipe = pipeline("{task}", model="PATH_OR_HUB_ID", framework="tf", dtype=None)
print(pipe("{example}"))
```
"""


# ----------------------------------------------------------------------------------------------------------------
# Models and hardware (run_mlm.py and run_classification.py): the tf.distribute strategy
#
# TensorFlow is imported inside these functions, so that the two data scripts, which import utils too, never pay
# for it.

# RoBERTa-style models number positions from pad_token_id + 1, so they need that many more position embeddings
# than the longest sequence (RoBERTa-base: 514 for 512 tokens).
MODELS_WITH_POSITION_OFFSET = ("roberta", "xlm-roberta", "camembert", "roberta-prelayernorm")


def position_offset(config):
    """The position embeddings that `config`'s model uses beyond its longest sequence: pad_token_id + 1 for the
    RoBERTa family, 0 for the others. run_mlm.py and run_classification.py check --max_length with it."""
    return config.pad_token_id + 1 if config.model_type in MODELS_WITH_POSITION_OFFSET else 0


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
    hardware.add_argument("--num_cpu_replicas", type=int, default=1,
                          help="On a machine without GPUs, split the CPU into this many devices and train one "
                               "replica on each: a dry run of multi-replica training without accelerators "
                               "(default: %(default)s).")
    hardware.add_argument("--steps_per_execution", type=int, default=1,
                          help="Steps run per call from Python into the device; larger values cut the per-step "
                               "overhead, mostly on TPUs (default: %(default)s).")
    hardware.add_argument("--bfloat16", action="store_true",
                          help="Mixed precision: compute in bfloat16, keep weights in float32. Fast on TPUs and "
                               "recent GPUs (A100, H100); slow on CPUs.")
    # Both spellings of the negative flag: argparse's BooleanOptionalAction would only accept --no-jit_compile.
    # The default (None) depends on the device: see use_jit_compile.
    hardware.add_argument("--jit_compile", action="store_true", default=None,
                          help="Compile each replica's forward and backward pass with XLA. Default: on with GPUs, "
                               "off on a CPU, where XLA measured slower for these models (benchmarks/README.md); "
                               "pass it there to rehearse a TPU's compilation. TPUs always compile everything "
                               "with XLA, whatever the flag.")
    hardware.add_argument("--no_jit_compile", "--no-jit_compile", dest="jit_compile", action="store_false",
                          help="Run the forward and backward pass without XLA, on GPUs too.")
    return hardware


def split_cpu(num_replicas):
    """Splits the CPU into `num_replicas` logical devices, when there is no GPU. Must run before TF starts up."""
    import tensorflow as tf

    if num_replicas > 1 and not tf.config.list_physical_devices("GPU"):
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * num_replicas)


# Every TPU chip is a PCI device of Google's vendor id; its device id names the generation (v2 and v3 share one,
# told apart by the subsystem id). These are the ids that Google's tpu-info tool reads.
GOOGLE_PCI_VENDOR_ID = "0x1ae0"
TPU_GENERATIONS = {("0x0027", "0x004e"): "v2", ("0x0027", "0x004f"): "v3", "0x005e": "v4", "0x0062": "v5p",
                   "0x0063": "v5e", "0x006f": "v6e", "0x0076": "7x"}


def local_tpu_chips(root="/"):
    """The TPU chips attached to this machine, by generation, e.g. {"v4": 4}; {} on a machine without any. Read
    from the PCI devices in sysfs, as JAX, PyTorch/XLA and tpu-info do: this works before (and without) any TPU
    software. Should sysfs not show them, /dev/accel* files (v2 to v4) count as chips of unknown generation.
    `root` lets tests point at a fake tree."""
    chips = {}
    for device in glob.glob(os.path.join(root, "sys/bus/pci/devices/*")):
        ids = {}
        for name in ("vendor", "device", "subsystem_device"):
            try:
                with open(os.path.join(device, name)) as f:
                    ids[name] = f.read().strip()
            except OSError:
                ids[name] = None
        if ids["vendor"] != GOOGLE_PCI_VENDOR_ID:
            continue
        generation = (TPU_GENERATIONS.get((ids["device"], ids["subsystem_device"]))
                      or TPU_GENERATIONS.get(ids["device"]))
        if generation:  # Google's other PCI devices (e.g. its network cards) are not TPUs.
            chips[generation] = chips.get(generation, 0) + 1
    if not chips:
        accel_files = glob.glob(os.path.join(root, "dev/accel[0-9]*"))
        if accel_files:
            chips["unknown generation"] = len(accel_files)
    return chips


def choose_strategy(args, root="/"):
    """The tf.distribute strategy for this machine, and whether it is a TPU one. Call it before any TensorFlow op:
    the CPU is split into --num_cpu_replicas devices first, and MultiWorkerMirroredStrategy sets up its collective
    ops at start-up. A machine with TPU chips never falls back to its CPU silently: if TensorFlow cannot use them,
    the script stops and says why. `root` lets tests point at a fake sysfs."""
    import tensorflow as tf

    split_cpu(args.num_cpu_replicas)
    # A machine with TPU chips uses them by default: the probe stays here, as every run without --no_tpu needs it.
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
            if tpu_name == "local" and chips:
                from diagnostics import explain_unusable_tpu, tensorflow_build, tpu_holders

                raise SystemExit(explain_unusable_tpu(chips, err, tensorflow_build(), tpu_holders(root))) from err
            raise SystemExit(
                f"error: cannot use the TPU {tpu_name!r}: {type(err).__name__}: {err}\n"
                + ("This machine has no TPU chips: --tpu_name local works on a TPU VM only. "
                   if tpu_name == "local" else
                   "Check the name, --tpu_zone and --gcp_project, and that the TPU is READY "
                   "(`gcloud compute tpus tpu-vm list`). ")
                + "To train on GPUs or the CPU instead, leave out --tpu_name or pass --no_tpu.") from err
    if "TF_CONFIG" in os.environ:
        return tf.distribute.MultiWorkerMirroredStrategy(), False
    devices = [device.name for device in tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")]
    if len(devices) == 1:
        # MirroredStrategy over a single device still pays for its cross-replica machinery on every step (its cost
        # is measured in benchmarks/README.md); OneDeviceStrategy keeps the same code path
        # (scope, distributed datasets, replica context) without it.
        return tf.distribute.OneDeviceStrategy(devices[0]), False
    return tf.distribute.MirroredStrategy(devices), False


def set_up_training(args, input_paths):
    """What both training scripts do first, in this order; returns (strategy, on_tpu, jit_compile). The gs://
    paths first: a missing bucket or permission must not wait for a TPU to start. Then the strategy, before any
    TensorFlow op; then the seeds and the precision, before any model is built."""
    import tf_keras as keras

    for path in input_paths:
        check_gcs_path(path)
    check_gcs_path(args.output_dir, write=True)
    strategy, on_tpu = choose_strategy(args)
    set_seed(args.seed)
    if args.bfloat16:
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    return strategy, on_tpu, use_jit_compile(args, on_tpu)


def set_seed(seed):
    """Seeds Python, NumPy and TensorFlow: what keras.utils.set_random_seed does, less the seed generator it also
    installs. tf-keras 2.18 draws from that one with random.randint(1, 1e9), which Python 3.12 refuses (a float
    bound); without it, tf-keras draws its layers' seeds with random.randint(1, int(1e9)) from Python's own
    generator, seeded here just the same."""
    import numpy as np
    import tensorflow as tf

    random.seed(seed)
    np.random.seed(seed)
    tf.random.set_seed(seed)


def use_jit_compile(args, on_tpu):
    """Whether to XLA-compile each replica's forward and backward pass: --jit_compile/--no_jit_compile if given,
    else on with GPUs (where XLA's fused kernels pay) and off on a CPU (where they measured slower). On a TPU the
    whole step is compiled by XLA anyway, and compiling part of it again inside would gain nothing."""
    import tensorflow as tf

    if on_tpu:
        return False
    if args.jit_compile is not None:
        return args.jit_compile
    return bool(tf.config.list_logical_devices("GPU"))


def count_hosts(strategy):
    """Machines whose CPUs run an input pipeline: the hosts of a TPU (one for a TPU VM, all of a pod slice's), or
    the workers of a multi-worker cluster."""
    import tensorflow as tf

    if isinstance(strategy, tf.distribute.TPUStrategy):
        return strategy.extended.num_hosts
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        cluster = strategy.cluster_resolver.cluster_spec().as_dict()
        return len(cluster.get("chief", [])) + len(cluster.get("worker", []))
    return 1


def host_addresses(strategy):
    """The addresses of the hosts counted by count_hosts, as the cluster resolver gives them ([] for one host)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or count_hosts(strategy) == 1:
        return []
    cluster = resolver.cluster_spec().as_dict()
    return [*cluster.get("chief", []), *cluster.get("worker", [])]


def strategy_name(strategy):
    import tensorflow as tf

    # MultiWorkerMirroredStrategy is the public name of the class TF calls CollectiveAllReduceStrategy.
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return "MultiWorkerMirroredStrategy"
    return type(strategy).__name__


if __name__ == "__main__":
    from diagnostics import main  # `python utils.py check-tpu`, as the README and the Makefile say.

    main()
