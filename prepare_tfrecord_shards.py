#!/usr/bin/env python
"""Step 2: tokenize a corpus and write it as fixed-length samples in TFRecord shards.

Each split (train, validation, ...) is streamed in batches of texts; empty and whitespace-only texts are skipped,
every other one is tokenized (the tokenizer of step 1 wraps it in <s> ... </s>), and the tokens of all texts are
concatenated into one stream, cut into samples of exactly --max_length tokens. Cutting a stream rather than padding
or truncating each text keeps every token and wastes no compute on padding; the tokens left at the end (fewer than
--max_length) are dropped and counted. Memory stays at a few batches, whatever the corpus size. With
--validation_share, the validation split is held out of the training files: both splits read them, each keeping
the texts of its side (corpus.Holdout: by a hash of each text).

A split of text files read whole (no --limit) is cut into contiguous parts of whole lines, one per worker process
(--num_workers; by default one per core, at most one per 16 MiB of text), each tokenized, cut and written on its
own: the tokens left over are dropped at the end of each part, and no sample spans two parts; the samples keep the
order of the text and the shards are numbered across the parts. With --runner, the same per-part work runs as an
Apache Beam pipeline (beam_pipeline.py), on this machine or on Dataflow. Hub datasets and JSON-lines or Parquet
files are read through 🤗 Datasets as one stream, by this process.

A file's format is told by its extension, or by --file_format where its name tells none (part-00000, as data jobs
name their output). Compressed text and JSON-lines files (.gz, .bz2, .xz, .zst) are read as they are, decompressed as
they are read. Such a file is never cut: it is read whole by one worker, so a corpus in one large compressed file is
written by one process, and spreads over the workers in several smaller ones.

Each split folder, {output_dir}/{split}/, holds the files of the shard contract (shards.py): INCOMPLETE while it is
written; the shards, dataset-{index}-{num_samples}.tfrecord, --shard_size samples each, each written under a
temporary name (*.tfrecord.tmp) and renamed once every part is complete; token_counts.json; then manifest.json,
written last. A record is a tf.train.Example of int64 features of max_length values each:

    input_ids       the token ids of the sample
    attention_mask  all ones (samples are never padded), for readers of the original example's format
    word_starts     with --word_segmenter only: 1 where a token begins one of the segmenter's words (or is a special
                    token), 0 inside one; the manifest names the segmenter

For text files, local output and a tokenizer of train_unigram.py, nothing slow to import is imported: not
TensorFlow (RecordSerializer writes the bytes of its records), 🤗 Datasets or 🤗 Transformers. Every path may be
gs://, checked before anything is tokenized.

Example:
    python prepare_tfrecord_shards.py --tokenizer_name_or_path unigram-tokenizer \\
        --train_file data/train.txt --validation_file data/validation.txt --output_dir tfrecords
"""

import argparse
import itertools
import logging
import multiprocessing
import os
import sys
import time
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from tqdm import tqdm

from corpus import (add_corpus_arguments, compression, data_files_format, holdout_side, iter_text_file_batches,
                    text_batches)
from models import load_backend_tokenizer
from shards import (INCOMPLETE_MARKER_NAME, MANIFEST_NAME, MIN_MAX_LENGTH, finish_split, plan_parts, start_split,
                    write_part)
from utils import (UserError, check_gcs_path, check_output_dir, match_files, out_of_space_named, positive_float,
                   positive_int, probability, refuse_an_output_that_is_read)
from word_segmenters import SEGMENTERS, load_word_segmenter

logger = logging.getLogger("prepare_tfrecord_shards")

# The least text worth a worker process of its own: its start (a new Python, the imports, the tokenizer) and the
# tokens dropped at the end of its part are negligible beside 16 MiB, seconds of tokenizing for a core.
MIN_BYTES_PER_WORKER = 16 * 2**20
# With --runner, a file is cut into parts of at most this size: minutes of work for a core, long beside a
# worker's start, short enough that a large corpus spreads over many workers.
DEFAULT_PART_SIZE_MB = 256


OUT_OF_SPACE_ADVICE = (f"Nothing unfinished looks complete: a split not written to the end keeps its "
                       f"{INCOMPLETE_MARKER_NAME} marker and has no {MANIFEST_NAME}, and run_mlm.py refuses it. Free "
                       "space (--overwrite deletes the partial shards first), or choose an --output_dir with more "
                       "room, then run the same command again with --overwrite.")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    data = parser.add_argument_group("data (a Hub dataset by default, or files with --*_file)")
    add_corpus_arguments(data)
    data.add_argument("--split", nargs="+", help="Splits of the Hub dataset to write (default: all of them).")
    for split in ("train", "validation", "test"):
        data.add_argument(f"--{split}_file", nargs="+",
                          help=f"Text files (local or gs://), or local JSON-lines or Parquet files, for the {split} "
                               "split, instead of the Hub dataset (with --runner: all on gs:// too); globs in quotes "
                               "(\"gs://bucket/corpus/part-*\") stand for the files they match, in order. Text and "
                               "JSON-lines files may be compressed (corpus.txt.gz, .bz2, .xz, .zst): they are read as "
                               "they are. Files named without their format's extension (part-00000) need "
                               "--file_format.")
    data.add_argument("--validation_share", type=probability,
                      help="Hold this share of the --train_file texts out as the validation split (0.005: 0.5 %%), "
                           "instead of --validation_file: the texts whose hash falls under it (corpus.Holdout), "
                           "the same ones at every run.")
    parser.add_argument("--tokenizer_name_or_path", default="unigram-tokenizer",
                        help="Folder written by train_unigram.py (local or gs://), or a Hub tokenizer id "
                             "(default: %(default)s).")
    parser.add_argument("--max_length", type=positive_int, default=128,
                        help=f"Tokens per sample, at least {MIN_MAX_LENGTH}: a sample may hold a document bound "
                             "(</s> <s>), and a masked token needs context (default: %(default)s).")
    parser.add_argument("--word_segmenter", choices=sorted(SEGMENTERS),
                        help="Store where words begin beside the token ids, as this word segmenter cuts the text, "
                             "for run_mlm.py --masking whole_word: jieba or rjieba (Chinese), pythainlp (Thai), "
                             "fugashi (Japanese, with unidic-lite); each a package to install (default: none; "
                             "run_mlm.py then takes each Chinese character, kana or Thai syllable's piece for a "
                             "word).")
    parser.add_argument("--shard_size", type=positive_int, default=1000,
                        help="Samples per shard (default: %(default)s).")
    parser.add_argument("--batch_size", type=positive_int, default=1000,
                        help="Texts tokenized at a time (default: %(default)s).")
    parser.add_argument("--num_workers", type=positive_int,
                        help="Processes that write a split of text files side by side, each its own part of the "
                             "text; a compressed file is read whole by one (default: one per core, at most one per "
                             f"{MIN_BYTES_PER_WORKER // 2**20} MiB of files).")
    parser.add_argument("--output_dir", default="tfrecords",
                        help="Folder that receives a folder of shards per split, local or gs:// (default: "
                             "%(default)s).")
    parser.add_argument("--overwrite", action="store_true",
                        help="Write into a non-empty --output_dir, replacing the folders of the splits written.")
    beam = parser.add_argument_group("Apache Beam (pip install -r requirements-beam.txt)")
    beam.add_argument("--runner",
                      help="Write the shards with an Apache Beam pipeline on this runner: DirectRunner (this "
                           "machine) or DataflowRunner, from input files only. Beam's own options "
                           "follow and are passed to it (Dataflow: --project, --region, --temp_location, "
                           "--worker_machine_type, --max_num_workers, --requirements_file, --setup_file, ...), and "
                           "--num_workers, if given (Dataflow: its initial number of machines).")
    beam.add_argument("--part_size_mb", type=positive_float, default=DEFAULT_PART_SIZE_MB,
                      help="With --runner: each text or JSON-lines file is cut into parts of at most this many MiB, "
                           "each written by one worker core; a Parquet file is one part, and so is a compressed file "
                           "(default: %(default)s).")
    args, args.beam_args = parser.parse_known_args()
    if args.beam_args and not args.runner:
        parser.error(f"unrecognized arguments: {' '.join(args.beam_args)}")
    if args.max_length < MIN_MAX_LENGTH:
        parser.error(f"--max_length must be at least {MIN_MAX_LENGTH}, got {args.max_length}: shorter samples "
                     "leave too few tokens to mask, with too little context. Pass --max_length 128, or at least "
                     f"{MIN_MAX_LENGTH}.")
    if args.validation_share and args.validation_file:
        parser.error("--validation_share holds a validation split out of --train_file, and --validation_file gives "
                     "one: pass one or the other.")
    if args.validation_share and not args.train_file:
        parser.error("--validation_share holds a validation split out of the texts of --train_file: pass "
                     "--train_file (a Hub dataset has splits of its own).")
    return args


def main(args):
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    start = time.perf_counter()
    patterns = {split: getattr(args, f"{split}_file") for split in ("train", "validation", "test")
                if getattr(args, f"{split}_file")}
    inputs = [args.tokenizer_name_or_path, *itertools.chain(*patterns.values())]
    refuse_an_output_that_is_read(args.output_dir, inputs)
    for path in inputs:  # Fail before the long part.
        check_gcs_path(path)
    # Each glob expanded once, here: the parts are planned from the sizes of the files it matched.
    data_files = {split: match_files(paths, f"{split} file") for split, paths in patterns.items()}
    check_gcs_path(args.output_dir, write=True)
    check_output_dir(args.output_dir, args.overwrite)
    if args.word_segmenter:  # Its package, checked here rather than in every worker.
        load_word_segmenter(args.word_segmenter)
    if args.runner and not data_files:
        raise UserError("with --runner, pass input files (--train_file, --validation_file, --test_file; "
                        "globs allowed): the Beam pipeline does not read Hub datasets.")
    if args.validation_share:  # Both splits read the training files, each keeping its side (corpus.Holdout).
        data_files["validation"] = data_files["train"]
        logger.info("validation: %g %% of the texts of --train_file, held out by a hash of each text; train: the "
                    "rest", 100 * args.validation_share)
    with out_of_space_named(args.output_dir, "the shards", OUT_OF_SPACE_ADVICE):
        if args.runner:
            from beam_pipeline import run_beam_pipeline  # Only here: Beam is installed for --runner alone.

            manifests = run_beam_pipeline(data_files, args)
        else:
            manifests = write_splits_here(data_files, args)

    seconds, num_tokens = time.perf_counter() - start, sum(m.num_tokens for m in manifests)
    for m in manifests:
        logger.info("%s: %d samples (%d tokens, %d dropped at the ends of %d part(s)) in %d shards", m.split,
                    m.num_samples, m.num_tokens, m.dropped_tokens, m.num_parts, len(m.shards))
    logger.info("Done in %.1f s: %d samples, %d tokens, %d shards, %.0f tokens/s, written to %s", seconds,
                sum(m.num_samples for m in manifests), num_tokens, sum(len(m.shards) for m in manifests),
                num_tokens / seconds, args.output_dir)


def write_splits_here(data_files, args):
    """Writes every split of `data_files` ({split: [(path, size)]}, see utils.match_files; {} for the Hub dataset)
    with this machine's processes; returns the manifests."""
    tokenizer, vocab_size = load_backend_tokenizer(args.tokenizer_name_or_path)
    paths = {split: [path for path, _ in files] for split, files in data_files.items()}
    splits = text_batches(data_files=paths, file_format=args.file_format, dataset_name=args.dataset_name,
                          dataset_config=args.dataset_config, splits=args.split,
                          trust_remote_code=args.trust_remote_code, text_column=args.text_column,
                          batch_size=args.batch_size, limit=args.limit, long_texts=True)
    # Text files can be cut into parts; what goes through 🤗 Datasets is one stream.
    is_text = paths and data_files_format(paths, file_format=args.file_format) == "text"
    text_files = data_files if is_text else {}
    return [write_split(split, batches, text_files.get(split), tokenizer, vocab_size, args)
            for split, batches in splits.items()]


def write_split(split, batches, text_files, tokenizer, vocab_size, args):
    """Writes one split, from `batches` of texts, or in parts when it is `text_files` ([(path, size)]) read whole;
    returns the manifest."""
    split_dir = os.path.join(args.output_dir, split)
    start_split(split_dir)
    keep = holdout_side(split, args.validation_share)
    parts = [None]  # One part, from `batches`.
    if text_files and args.limit is None:  # Parts of equal size: they take about the same time.
        paths, sizes = zip(*text_files)  # Of a compressed file, its compressed size (plan_parts).
        num_workers = args.num_workers or max(1, min(available_cores(), sum(sizes) // MIN_BYTES_PER_WORKER))
        parts = plan_parts(paths, sizes, num_workers)
        if len(parts) < num_workers and any(map(compression, paths)):
            logger.warning("%s: %d part(s) for %d worker processes: a compressed file is never cut, each is read "
                           "whole by one process. A corpus in more, smaller files spreads over more workers.", split,
                           len(parts), num_workers)
    elif (args.num_workers or 1) > 1:
        logger.warning("%s: written by one process, not --num_workers %d: only text files read whole (without "
                       "--limit) are split between workers.", split, args.num_workers)
    if len(parts) > 1:
        written = write_parts_in_processes(split, parts, tokenizer, vocab_size, split_dir, args, keep)
    else:
        with tqdm(desc=f"{split}: tokenizing", unit=" texts") as text_bar, \
                tqdm(desc=f"{split}: writing", unit=" samples") as sample_bar:
            def progress(num_texts, num_samples):
                text_bar.update(num_texts)
                sample_bar.update(num_samples)

            written = [write_part(0, batches, tokenizer, vocab_size, split_dir, args, progress, keep)]
    return finish_split(split, split_dir, written, sum(part["token_counts"] for part in written), tokenizer,
                        vocab_size, args)


# ----------------------------------------------------------------------------------------------------------------
# Worker processes: a split of text files cut into contiguous parts, each written by a process of its own. However
# many cores tokenize for it, one process is held back by its one Python thread, which serializes and writes under
# Python's global lock (benchmarks/speed.md, "Shard preparation"); processes have a lock each.


def available_cores():
    """Cores this process may run on: its CPU affinity (set by taskset, or a container's cpuset)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def write_parts_in_processes(split, parts, tokenizer, vocab_size, split_dir, args, keep):
    """write_part for each part of a split of text files (the texts `keep` accepts, see corpus.holdout_side), each in
    a process of its own; their results, in the order of the parts. If a worker fails, the others stop at their next
    batch, and its error ends the run (the split keeps its INCOMPLETE marker)."""
    # Processes started afresh ("spawn"), not forked: a forked copy would inherit the threads of 🤗 Tokenizers or
    # TensorFlow in whatever state they were.
    context = multiprocessing.get_context("spawn")
    counters = context.Value("q", 0), context.Value("q", 0)  # Texts and samples written by all workers so far.
    stop = context.Event()
    # Tokenizer threads per worker: workers x threads = cores; more would only wait for one another.
    threads = max(1, available_cores() // len(parts))
    logger.info("%s: %d worker processes, %d tokenizer thread(s) each, %.1f MiB of files each", split, len(parts),
                threads, sum(end - start for part in parts for _, start, end in part) / len(parts) / 2**20)
    results = [None] * len(parts)
    with ProcessPoolExecutor(len(parts), mp_context=context, initializer=start_worker,
                             initargs=(threads, counters, stop)) as workers, \
            tqdm(desc=f"{split}: tokenizing", unit=" texts") as text_bar, \
            tqdm(desc=f"{split}: writing", unit=" samples") as sample_bar:
        futures = {workers.submit(write_text_part, index, part, tokenizer, vocab_size, split_dir, args, keep): index
                   for index, part in enumerate(parts)}
        try:
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=1, return_when=FIRST_EXCEPTION)
                text_bar.update(counters[0].value - text_bar.n)
                sample_bar.update(counters[1].value - sample_bar.n)
                for future in done:
                    results[futures[future]] = future.result()  # Raises the worker's error, if any.
        except BrokenProcessPool as error:
            raise UserError(f"a worker process writing the {split} split ended abruptly (killed, or out of "
                            "memory?); the split is left INCOMPLETE. Run again with --overwrite (with fewer "
                            "--num_workers if memory ran out).") from error
        finally:
            stop.set()  # After a failure (or Ctrl-C), the other workers stop at their next batch.
    return results


worker_state = {}  # In each worker process: the shared counters and the stop signal.


def start_worker(threads, counters, stop):
    # 🤗 Tokenizers sizes its thread pool from RAYON_NUM_THREADS when it starts, at the first batch.
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    worker_state.update(counters=counters, stop=stop)


def report_progress(num_texts, num_samples):
    """write_part's progress in a worker: adds to the shared counters; stops when the main process says so."""
    for counter, count in zip(worker_state["counters"], (num_texts, num_samples)):
        with counter.get_lock():
            counter.value += count
    if worker_state["stop"].is_set():
        raise SystemExit("stopped: another worker failed")


def write_text_part(part, files, tokenizer, vocab_size, split_dir, args, keep):
    """write_part for a part of text files (byte ranges, see plan_parts), in a worker process."""
    return write_part(part, iter_text_file_batches(files, args.batch_size, long_texts=True), tokenizer, vocab_size,
                      split_dir, args, report_progress, keep)


if __name__ == "__main__":
    try:
        main(parse_args())
    except UserError as err:  # Bad input: its message alone, without a traceback.
        sys.exit(f"error: {err}")
