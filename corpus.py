"""Reading a text corpus, streamed, for train_unigram.py and prepare_tfrecord_shards.py: local or gs:// text files
read at disk speed, JSON-lines and Parquet files and Hub datasets through 🤗 Datasets, in batches of texts. Memory
stays flat whatever the corpus size. run_classification.py checks its data files' format here too.
"""

import itertools
import os

from utils import UserError, exists, is_gcs_path, open_file, positive_int


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
