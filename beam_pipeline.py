"""prepare_tfrecord_shards.py --runner: the same work, part by part, as an Apache Beam pipeline, on this machine
(DirectRunner) or on as many machines as the corpus needs (DataflowRunner). Imported with --runner only, so that the
local path neither needs Beam nor pays for its import; setup.py ships it to the Dataflow workers.

  per split:  parts ──Reshuffle──► write_part, on the workers ──┬─► shards written ──ToList──┐
                                                                └─► token counts ────sum─────┴─► finish_split

Parts are written side by side on the workers; finish_split runs once, after every part (Beam computes a side input
completely before the step that reads it), and publishes the split as the local path does.
"""

import functools
import json
import logging
import math
import os

from corpus import CORPUS_BUILDERS, batches_of_texts, compression, file_builder, holdout_side, iter_text_file_lines
from models import load_backend_tokenizer
from shards import MANIFEST_NAME, Manifest, finish_split, plan_parts, start_split, write_part
from utils import UserError, is_gcs_path, open_file

logger = logging.getLogger("prepare_tfrecord_shards")


def beam_parts(files, part_size, file_format):
    """The parts of a split: each text or JSON-lines file of `files` ([(path, size)], in `file_format` where their
    names tell none: --file_format, None for by name only) cut into parts of at most `part_size` bytes (see
    plan_parts), each Parquet file one part, and each compressed file (never cut)."""
    parts = []
    for path, size in files:
        if file_builder(path, file_format) == "parquet" or compression(path):
            parts.append([(path, 0, size)])
        else:
            parts += plan_parts([path], [size], max(1, math.ceil(size / part_size)))  # An empty file: none.
    return parts


def part_texts(part, text_column, file_format):
    """The texts of a part (byte ranges of one file, see beam_parts): the lines of a text file, the `text_column`
    of each line of a JSON-lines file or of each row of a Parquet file (in `file_format` where its name tells none,
    as beam_parts); compressed ones decompressed as they are read. Read here, not by 🤗 Datasets, which reads
    JSON-lines and Parquet files from local disk only."""
    path = part[0][0]
    data_format = file_builder(path, file_format)
    if data_format == "text":
        yield from iter_text_file_lines(part)
    elif data_format == "json":
        for line in filter(str.strip, iter_text_file_lines(part)):  # The lines that are not blank.
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            if not isinstance(record, dict):
                raise UserError(f"{path!r} is not a JSON-lines file (one JSON object per line): "
                                f"{line[:100]!r}")
            if text_column not in record:
                raise UserError(f"a line of {path!r} has no column {text_column!r}; its columns are "
                                f"{sorted(record)}. Choose one with --text_column.")
            yield record[text_column]
    else:
        import pyarrow.parquet as parquet

        with open_file(path, "rb") as f:
            parquet_file = parquet.ParquetFile(f)
            if text_column not in parquet_file.schema_arrow.names:
                raise UserError(f"{path!r} has no column {text_column!r}; its columns are "
                                f"{parquet_file.schema_arrow.names}. Choose one with --text_column.")
            for batch in parquet_file.iter_batches(columns=[text_column]):
                yield from batch.column(0).to_pylist()


# Once per worker process: a Beam worker writes many parts.
load_tokenizer_once = functools.cache(load_backend_tokenizer)


def write_part_on_beam_worker(numbered_part, split_dir, args, keep):
    """write_part for one part of the Beam pipeline (the texts `keep` accepts, see corpus.holdout_side), on a
    worker: (its result with the part's number, its token counts), the counts apart to be summed, not gathered with
    every part's result."""
    number, part = numbered_part
    # One tokenizer thread per process, set before 🤗 Tokenizers starts its pool at the first batch: Beam runs a
    # process per core already (Dataflow: one per vCPU), and more threads would only compete for the cores.
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    tokenizer, vocab_size = load_tokenizer_once(args.tokenizer_name_or_path)
    path, start, _ = part[0]  # A part is one file's bytes from `start` (see beam_parts).
    batches = batches_of_texts(part_texts(part, args.text_column, args.file_format), args.batch_size,
                               f"the {args.text_column!r} field of record {{}} of {path!r} from byte {start} (blank "
                               "lines not counted)")
    written = write_part(number, batches, tokenizer, vocab_size, split_dir, args,
                         progress=lambda num_texts, num_samples: None, keep=keep)
    token_counts = written.pop("token_counts")
    return {"part": number, **written}, token_counts


def finish_split_on_beam_worker(split, split_dir, args, parts, token_counts):
    tokenizer, vocab_size = load_tokenizer_once(args.tokenizer_name_or_path)
    parts = sorted(parts, key=lambda part: part["part"])  # ToList gathers them in any order.
    finish_split(split, split_dir, parts, token_counts, tokenizer, vocab_size, args)


def run_beam_pipeline(data_files, args):
    """Writes each split of `data_files` ({split: [(path, size)]}, see utils.match_files) with a Beam pipeline on
    args.runner; returns the manifests."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    beam_args = ["--runner", args.runner, *args.beam_args]
    if args.num_workers:  # Dataflow's own flag of the same name: its initial number of worker machines.
        beam_args += ["--num_workers", str(args.num_workers)]
    paths = [args.tokenizer_name_or_path, args.output_dir,
             *(path for files in data_files.values() for path, _ in files)]
    if args.runner not in StandardOptions.LOCAL_RUNNERS and not all(is_gcs_path(path) for path in paths):
        raise UserError(f"with --runner {args.runner}, the workers run on other machines: the input files, "
                        "--tokenizer_name_or_path and --output_dir must be gs:// paths, got "
                        f"{[path for path in paths if not is_gcs_path(path)]}.")
    # Fail before the pipeline starts: the tokenizer loads, the input files have one known format.
    load_backend_tokenizer(args.tokenizer_name_or_path)
    split_parts = {}
    for split, files in data_files.items():
        formats = {file_builder(path, args.file_format) for path, _ in files}
        if not formats <= set(CORPUS_BUILDERS) or len(formats) > 1:
            raise UserError(f"the {split} files must all be text (.txt), JSON-lines (.jsonl, .json) or "
                            "Parquet (.parquet) files, of one format, text and JSON-lines ones compressed or not "
                            "(.txt.gz, .jsonl.zst, ...); files whose names do not tell their format (part-00000, "
                            f"part-00000.gz) with --file_format: got {[path for path, _ in files]}.")
        split_parts[split] = beam_parts(files, int(args.part_size_mb * 2**20), args.file_format)
        logger.info("%s: %d file(s), %.1f MiB, in %d part(s)", split, len(files),
                    sum(size for _, size in files) / 2**20, len(split_parts[split]))

    # A step that fails is logged by Beam with its traceback, then its error is raised here, where it reaches the
    # user: bad input as a SystemExit's message alone, anything else with its traceback. Once is enough.
    logging.getLogger("apache_beam.runners.common").setLevel(logging.CRITICAL)
    with beam.Pipeline(options=PipelineOptions(beam_args)) as pipeline:
        for split, parts in split_parts.items():
            split_dir = os.path.join(args.output_dir, split)
            start_split(split_dir)
            written = (pipeline
                       | f"{split}: parts" >> beam.Create(list(enumerate(parts)))
                       | f"{split}: spread over workers" >> beam.Reshuffle()
                       | f"{split}: write parts" >> beam.Map(write_part_on_beam_worker, split_dir, args,
                                                             holdout_side(split, args.validation_share)))
            results = written | f"{split}: results" >> beam.Keys() | f"{split}: gather" >> beam.combiners.ToList()
            token_counts = written | f"{split}: counts" >> beam.Values() | f"{split}: sum" >> beam.CombineGlobally(sum)
            (pipeline
             | f"{split}: once" >> beam.Create([split])
             | f"{split}: finish" >> beam.Map(finish_split_on_beam_worker, split_dir, args,
                                              beam.pvalue.AsSingleton(results),
                                              beam.pvalue.AsSingleton(token_counts)))
    manifests = []
    for split in split_parts:
        path = os.path.join(args.output_dir, split, MANIFEST_NAME)
        with open_file(path, "r") as f:
            manifests.append(Manifest.from_json(f.read(), path))
    return manifests
