"""Reading a text corpus, streamed, for train_unigram.py and prepare_tfrecord_shards.py: local or gs:// text files
read at disk speed, JSON-lines and Parquet files and Hub datasets through 🤗 Datasets, in batches of texts; text and
JSON-lines files compressed (.gz, .bz2, .xz, .zst) too, read as they are; files whose names tell no format (part-00000,
as Spark, Hadoop and Beam name them) in the one --file_format says. Memory stays flat whatever the corpus size.
run_classification.py checks its data files' format here too.
"""

import bz2
import collections
import contextlib
import dataclasses
import gzip
import hashlib
import itertools
import lzma
import os
import tempfile
import zlib

from utils import UserError, exists, is_gcs_path, open_file, positive_int

try:  # Zstandard: the standard library's from Python 3.14, its backport before (requirements-libraries.txt).
    from compression import zstd
except ImportError:
    from backports import zstd


# Which 🤗 Datasets builder reads a file, by its extension: the one format detection of the scripts.
FILE_BUILDERS = {".txt": "text", ".text": "text", ".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json",
                 ".parquet": "parquet"}
# The formats of a corpus (train_unigram.py, prepare_tfrecord_shards.py), as --file_format names them for files whose
# names tell none (a data job's output, part-00000 or part-00000.gz, has no extension of its format), and their
# builders.
FILE_FORMATS = {"text": "text", "jsonl": "json", "parquet": "parquet"}
CORPUS_BUILDERS = tuple(FILE_FORMATS.values())


# Compressed files, by the extension after their format's: corpus.txt.gz is text, compressed with gzip. Text files
# (and JSON-lines ones on Beam's workers) are read here, through the standard library's reader of their compression
# (`open`, given a binary file object), which decompresses as it is read: memory stays flat, and nothing is unpacked
# on disk. 🤗 Datasets reads the JSON-lines ones, with the same readers (fsspec's). Each compression has its command-
# line tool, whose -t tests a file, and the bytes that its files begin with.
Compression = collections.namedtuple("Compression", "tool open magic")
COMPRESSIONS = {".gz": Compression("gzip", gzip.open, b"\x1f\x8b"), ".bz2": Compression("bzip2", bz2.open, b"BZh"),
                ".xz": Compression("xz", lzma.open, b"\xfd7zXZ\x00"),
                ".zst": Compression("zstd", zstd.open, b"\x28\xb5\x2f\xfd")}
# Only these: Parquet files compress their columns themselves, and run_classification.py tells a TSV file from a CSV
# one by the end of its name.
COMPRESSIBLE_BUILDERS = ("text", "json")


def extensions(path):
    """The extension of a file's format and that of its compression, "" for none: (".txt", ".gz") for corpus.txt.gz,
    (".txt", "") for corpus.txt."""
    name, last = os.path.splitext(str(path).lower())
    return (os.path.splitext(name)[1], last) if last in COMPRESSIONS else (last, "")


def compression(path):
    """The Compression of a file, by its name; None for an uncompressed one."""
    return COMPRESSIONS.get(extensions(path)[1])


def file_builder(path, file_format=None):
    """The 🤗 Datasets builder that reads a file, by its extension ("text" for .txt and .txt.gz), else by
    `file_format` (a name of FILE_FORMATS: --file_format), which says the format under a compression's extension too
    ("text" for part-00000 and part-00000.gz); None for an unknown one."""
    format_extension, compression_extension = extensions(path)
    builder = FILE_BUILDERS.get(format_extension) or FILE_FORMATS.get(file_format)
    return builder if not compression_extension or builder in COMPRESSIBLE_BUILDERS else None


def add_corpus_arguments(group):
    """The corpus flags that train_unigram.py and prepare_tfrecord_shards.py share; each adds its file flags."""
    group.add_argument("--dataset_name", default="Salesforce/wikitext",
                       help="Dataset on the Hugging Face Hub (default: %(default)s).")
    group.add_argument("--dataset_config", default="wikitext-103-raw-v1",
                       help="Configuration of the Hub dataset (default: %(default)s).")
    group.add_argument("--text_column", default="text",
                       help="Column holding the text, for Hub datasets and JSON/Parquet files (default: %(default)s).")
    group.add_argument("--file_format", choices=list(FILE_FORMATS),
                       help="Format of the input files whose names do not tell it, as a data job names them (Spark, "
                            "Hadoop, Beam: part-00000, part-00000.gz): text (one record per line), jsonl or parquet. "
                            "Compressed ones by their compression's extension. Files named .txt, .jsonl, .parquet, "
                            "... are read by their extension (default: by extension only).")
    group.add_argument("--limit", type=positive_int,
                       help="Read only the first LIMIT records of each split, for a quick run (default: all).")
    group.add_argument("--trust_remote_code", action="store_true",
                       help="Allow a Hub dataset to run its own loading script. Off by default: only turn it on "
                            "for datasets whose code you trust.")


def text_batches(*, text_column, batch_size, limit=None, data_files=None, file_format=None, dataset_name=None,
                 dataset_config=None, splits=None, trust_remote_code=False, long_texts=False):
    """{split: iterator of lists of up to `batch_size` texts}, empty and whitespace-only texts left out, `limit`
    records read at most per split, streamed: memory stays flat whatever the corpus size. From `data_files`
    ({split: [paths]}, in `file_format` where their names tell none) or the Hub dataset `dataset_name` (`splits`:
    those to read, None for all). Text files are read here, at disk speed (with `long_texts`, texts longer than
    LONG_TEXT_BYTES as LongText, for shards.py's tokenizing); the others through 🤗 Datasets."""
    builder = data_files_format(data_files, file_format=file_format) if data_files else None  # Each file checked.
    if builder == "text":
        if text_column != "text":  # As 🤗 Datasets' "text" builder, whose only column is "text".
            raise UserError(f"the data has no column {text_column!r}; its columns are ['text']. "
                            "Choose one with --text_column.")
        return {split: iter_text_file_batches(paths, batch_size, limit, long_texts)
                for split, paths in data_files.items()}
    import datasets  # Only here: it takes a second to import.

    if data_files:
        with damage_named(itertools.chain(*data_files.values())):  # It reads the files' beginnings already.
            corpus = datasets.load_dataset(builder, data_files=data_files, streaming=True)
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
    return {split: iter_text_batches(dataset, text_column, batch_size, limit, f"the {split} split",
                                     data_files[split] if data_files else [])
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


def data_files_format(data_files, formats=CORPUS_BUILDERS, file_format=None):
    """The 🤗 Datasets builder, one of `formats`, that reads every file of `data_files` ({split: [paths]}), in
    `file_format` where their names tell none (see file_builder); UserError for a missing file, an unknown extension
    or a mix of formats."""
    builders = set()
    for split, paths in data_files.items():
        for path in paths:
            builder = file_builder(path, file_format)
            if builder not in formats:
                raise unknown_format_error(path, formats, file_format)
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


def unknown_format_error(path, formats, file_format):
    """The UserError for a file that no builder of `formats` reads, by its name or `file_format`: the extensions to
    use, and --file_format where the scripts that read a corpus take it and it was not given."""
    known = [extension for extension, name in FILE_BUILDERS.items() if name in formats]
    compressible = [extension for extension in known if FILE_BUILDERS[extension] in COMPRESSIBLE_BUILDERS]
    advice = f"; {'/'.join(compressible)} ones also compressed ({', '.join(COMPRESSIONS)})" if compressible else ""
    if formats == CORPUS_BUILDERS and not file_format:
        advice += (f", or pass --file_format ({', '.join(FILE_FORMATS)}) for files whose names do not tell their "
                   "format (part-00000, part-00000.gz)")
    format_extension, compression_extension = extensions(path)
    unknown = f"unknown extension {format_extension + compression_extension!r}" if format_extension \
        else "no extension of its format"
    return UserError(f"cannot read {path!r}: {unknown}. Use files of one of these: {', '.join(known)}{advice}.")


def iter_text_batches(dataset, text_column, batch_size, limit=None, source="the input", paths=()):
    """The texts of a streamed 🤗 dataset in lists of up to `batch_size`; `limit` records at most. `source` names
    the dataset in errors ("the train split"); `paths` are the files it reads, if any (see damage_named)."""
    if text_column not in (dataset.column_names or [text_column]):
        raise UserError(f"the data has no column {text_column!r}; its columns are {dataset.column_names}. "
                        "Choose one with --text_column.")

    def records():
        with damage_named(paths):
            yield from dataset.take(limit) if limit is not None else dataset

    texts = (record[text_column] for record in records())
    return batches_of_texts(texts, batch_size, f"the {text_column!r} field of record {{}} of {source}")


@contextlib.contextmanager
def damage_named(paths):
    """Around 🤗 Datasets' reading of the files `paths`: where a compressed one proves damaged, the UserError that
    names it (see open_corpus_file). 🤗 Datasets raises the decompressor's error as it is, naming no file: the
    compressed files are read again, to find the one."""
    try:
        yield
    except Exception as error:
        if not is_archive_error(error):
            raise
        for path in filter(compression, paths):
            read_to_the_end(path)
        raise


def iter_text_file_batches(files, batch_size, limit=None, long_texts=False):
    """iter_text_batches for text files (paths, or (path, start, end) byte ranges): the texts that 🤗 Datasets'
    "text" builder gives, read at disk speed; with `long_texts`, texts longer than LONG_TEXT_BYTES as LongText."""
    return batches_of_texts(itertools.islice(iter_text_file_lines(files, long_texts), limit), batch_size)


# Lines are read this many bytes at a time, and a text longer than LONG_TEXT_BYTES is never held whole by the reader
# (with long_texts): a line of 10 MB read whole took 5 to 6 times its size, in bytes, the reader's buffer, the
# decoded text (two bytes per character once one character is beyond Latin-1) and a copy without its "\n".
READ_CHUNK_BYTES = 1 << 20
LONG_TEXT_BYTES = 1 << 20


class LongText:
    """A text longer than LONG_TEXT_BYTES, held as where it lies in its file: bytes [start, end) of `path`, already
    checked to be UTF-8. pieces() reads it back a chunk at a time; str() gives it whole. The text of a compressed file
    lies in `copy`, an uncompressed copy of its line (see long_line_texts), at `path`: kept while the text is."""

    def __init__(self, path, start, end, space_only, copy=None):
        self.path, self.start, self.end, self.space_only, self.copy = path, start, end, space_only, copy

    def isspace(self):
        return self.space_only

    def pieces(self):
        """The text in pieces of at most READ_CHUNK_BYTES characters, in order."""
        import codecs

        decoder = codecs.getincrementaldecoder("utf-8")()
        with open_file(self.path, "rb") as f:
            f.seek(self.start)
            position = self.start
            while position < self.end:
                chunk = f.read(min(READ_CHUNK_BYTES, self.end - position))
                if not chunk:
                    break
                position += len(chunk)
                if piece := decoder.decode(chunk, final=position >= self.end):
                    yield piece

    def __str__(self):
        return "".join(self.pieces())


@dataclasses.dataclass(frozen=True)
class Holdout:
    """One side of a validation split held out of the training texts (prepare_tfrecord_shards.py
    --validation_share): called with a text, whether it is on this side, the `validation` one or the rest.

    A text is held out when a hash of its UTF-8 bytes falls in the lowest `share` of the hash's range. It depends on
    the text alone: both splits read the same files, each keeping its side, and the split is the same however the
    files are cut among workers or Beam parts, at every run; identical texts (repeated boilerplate) are on the same
    side, so no validation text is also a training text. BLAKE2, not Python's hash() (salted anew in each process)
    nor a CRC (linear: texts a few characters apart, numbered lines, need not spread evenly). A text longer than
    LONG_TEXT_BYTES stays in train: a LongText would have to be read again to be hashed, and one such text (a book
    on one line: hundreds of thousands of tokens) would be most of a small validation split."""
    share: float
    validation: bool

    def __call__(self, text):
        return self.held_out(text) == self.validation

    def held_out(self, text):
        if isinstance(text, LongText) or len(data := text.encode()) > LONG_TEXT_BYTES:
            return False
        return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big") < self.share * 2**64


def holdout_side(split, validation_share):
    """The side of the Holdout that `split` keeps with a `validation_share` (train and validation then read the
    same files), or None: every text of its files (no share, or another split)."""
    if validation_share and split in ("train", "validation"):
        return Holdout(validation_share, validation=split == "validation")
    return None


def iter_text_file_lines(files, long_texts=False):
    """The lines of text files, without their line breaks: "\\n", "\\r\\n" or "\\r", as Python's universal newlines
    and 🤗 Datasets split them. Each of `files` is a path, or a (path, start, end) byte range: the lines that begin
    in [start, end) (end None: the end of the file), a line beginning at 0 and after each "\\n". Consecutive ranges,
    wherever cut, give each line once (prepare_tfrecord_shards.py cuts files into parts so). A compressed file is read
    whole, its range being (0, its size): its bytes can only be read from its start, and plan_parts never cuts it. A
    line is read READ_CHUNK_BYTES at a time; with `long_texts`, a text longer than LONG_TEXT_BYTES comes as a LongText
    (where it lies), never whole, and as a str otherwise."""
    for file in files:
        path, start, end = (file, 0, None) if isinstance(file, (str, os.PathLike)) else file
        if compression(path):
            end = None  # Its size counts compressed bytes, and the reader's positions the text's.
        with open_corpus_file(path) as f:
            if start:
                f.seek(start - 1)
                f.readline()  # The byte before `start`, up to and with the "\n" that ends its line.
            position = f.tell()
            while end is None or position < end:
                chunk = f.readline(READ_CHUNK_BYTES)
                if not chunk:
                    break
                if chunk.endswith(b"\n") or len(chunk) < READ_CHUNK_BYTES:  # The whole line, as it always was read.
                    position += len(chunk)
                    try:
                        text = chunk.decode("utf-8").removesuffix("\n")
                    except UnicodeDecodeError as err:
                        raise not_utf8(path) from err
                    yield from text.removesuffix("\r").split("\r")
                else:
                    position = yield from long_line_texts(f, path, position, chunk, long_texts)


def not_utf8(path):
    """The UserError for the text file `path`, which is not UTF-8: that of its damage, for a compressed file that is
    damaged (damage decompresses into bytes that are seldom UTF-8, and an archive's checksum comes at its end); for a
    file compressed that its name does not say is, that it is."""
    from diagnostics import not_utf8_error

    named = compression(path)
    if named:
        read_to_the_end(path)
    else:
        with open_file(path, "rb") as f:
            beginning = f.read(8)
        for extension, found in COMPRESSIONS.items():
            if beginning.startswith(found.magic):
                return UserError(f"the text file {path!r} is {found.tool}-compressed, but its name does not say so: "
                                 f"name it {os.path.basename(path)}{extension}, and it is read as it is (a gs:// "
                                 "object is read as stored, one stored with Content-Encoding: gzip too).")
    # The converted file keeps the extensions that the scripts read it by: corpus.utf8.txt.gz for corpus.txt.gz.
    name = str(path)
    stem = name[:len(name) - len("".join(extensions(path)))]
    converted = f"{stem}.utf8{name[len(stem):]}"
    with open_corpus_file(path) as f:
        return UserError(not_utf8_error(path, f, converted, named.tool if named else None))


# What each decompressor raises for a damaged file, or one that is not of its compression (a truncated one: EOFError,
# from every one); bz2's is a plain OSError, which has no errno (unlike a failed read of the file itself).
ARCHIVE_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error, lzma.LZMAError, zstd.ZstdError)


def is_archive_error(error):
    return isinstance(error, ARCHIVE_ERRORS) or type(error) is OSError and error.errno is None


@contextlib.contextmanager
def open_corpus_file(path):
    """A corpus file, local or gs://, open for reading bytes; a compressed one (COMPRESSIONS) decompressed as it is
    read, and where it proves truncated or damaged, a UserError that names it and says what to do: the one place
    where a compressed file is read."""
    named = compression(path)
    with open_file(path, "rb") as file:
        if named is None:
            yield file
            return
        try:
            with named.open(file) as decompressed:
                yield decompressed
        except Exception as error:
            if not is_archive_error(error):
                raise
            check = f"gcloud storage cat {path} | {named.tool} -t" if is_gcs_path(path) else f"{named.tool} -t {path}"
            raise UserError(f"cannot read {path!r} as {named.tool}-compressed, as its name says it is: {error}. It "
                            f"is truncated or damaged (a download or copy cut short?), or not {named.tool}-compressed: "
                            f"test it with `{check}`, then copy it again, or give it the extension of its format."
                            ) from error


def read_to_the_end(path):
    """Reads a corpus file to its end, for the UserError of a compressed one's damage (see open_corpus_file)."""
    with open_corpus_file(path) as f:
        while f.read(READ_CHUNK_BYTES):
            pass


def long_line_texts(f, path, position, chunk, long_texts):
    """The texts of a line longer than READ_CHUNK_BYTES that begins at byte `position` of `f` with `chunk`, read a
    chunk at a time: those of up to LONG_TEXT_BYTES as str, longer ones as LongText (with `long_texts`; else read
    back whole, as str). The texts are split at "\\r"
    as iter_text_file_lines splits them ("\\r" is never inside a UTF-8 character). Returns where the next line
    begins."""
    import codecs

    # A LongText is read back from its file, which a compressed file allows from its start only, decompressing all that
    # comes before the text again (for each long text: hours, for a corpus of long lines). So the line of a compressed
    # file is copied as it is read, uncompressed, into a temporary file, which its LongTexts are read back from.
    copy = tempfile.NamedTemporaryFile(prefix="long-line-") if compression(path) else None
    source, origin = (copy.name, position) if copy else (path, 0)  # The file a LongText lies in, where the line begins.

    def new_text(begin):  # Where the text begins, its decoder, its characters while short, whether all are space.
        return {"begin": begin, "decoder": codecs.getincrementaldecoder("utf-8")(), "strings": [], "size": 0,
                "space_only": True}

    def finish(text, end):
        try:
            text["decoder"].decode(b"", final=True)  # A character cut off by the line's end is not UTF-8.
        except UnicodeDecodeError as err:
            raise not_utf8(path) from err
        if text["strings"] is None:
            if copy:
                copy.flush()
            long_text = LongText(source, text["begin"] - origin, end - origin, text["space_only"], copy)
            return long_text if long_texts else str(long_text)
        return "".join(text["strings"])

    text, ends_with_cr = new_text(position), False
    while True:
        if copy:
            copy.write(chunk)
        line_end = not chunk or chunk.endswith(b"\n") or len(chunk) < READ_CHUNK_BYTES  # Its "\n", or the file's end.
        content = chunk.removesuffix(b"\n")
        ends_with_cr = content.endswith(b"\r") if content else ends_with_cr
        parts = content.split(b"\r")
        for number, part in enumerate(parts):
            try:
                string = text["decoder"].decode(part)
            except UnicodeDecodeError as err:
                raise not_utf8(path) from err
            text["space_only"] &= not string or string.isspace()
            text["size"] += len(part)
            if text["strings"] is not None:
                text["strings"].append(string)
                if text["size"] > LONG_TEXT_BYTES:
                    text["strings"] = None  # From here on, only where it lies.
            position += len(part)
            if number < len(parts) - 1:  # A "\r" ends this text.
                yield finish(text, position)
                position += 1
                text = new_text(position)
        if line_end:
            if not ends_with_cr:  # A line's last "\r" ends it, as "\r\n" does: no empty text after it.
                yield finish(text, position)
            return position + len(chunk) - len(content)
        chunk = f.readline(READ_CHUNK_BYTES)


def batches_of_texts(texts, batch_size, where="record {} of the input"):
    """The texts in lists of up to `batch_size`, less empty and whitespace-only ones and None (null: how JSON and
    Parquet write a missing text). Any other value that is not a string (a number, a list, an object) stops the
    run, `where` naming it ("record {} of ...", numbered from 1): it is a wrong --text_column or a damaged export
    more often than a text, and skipping such records could skip a corpus. Every script reads texts here."""
    def texts_only():
        for number, text in enumerate(texts, start=1):
            if text is not None and not isinstance(text, (str, LongText)):
                raise UserError(f"{where.format(number)} is not text but {type(text).__name__} {str(text)[:80]}. "
                                "Every record's text must be a string (null counts as an empty text and is "
                                "skipped, as empty ones are). Fix or drop such records, or choose the column that "
                                "holds the text with --text_column.")
            if text and not text.isspace():
                yield text

    checked = texts_only()
    while batch := list(itertools.islice(checked, batch_size)):
        yield batch
