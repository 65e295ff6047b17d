"""Packages prepare_tfrecord_shards.py, beam_pipeline.py and the modules they import (diagnostics.py for its error
messages) for the workers of an Apache Beam job (Dataflow), and nothing else: `--setup_file ./setup.py`, with the
pinned libraries from `--requirements_file requirements.txt` (see the README, step 2, "Many machines"). The
pipeline's scripts run from the repository; this is not an installer for them."""

import setuptools

setuptools.setup(name="prepare-tfrecord-shards-workers", version="1.0",
                 py_modules=["prepare_tfrecord_shards", "beam_pipeline", "corpus", "models", "shards", "utils",
                             "word_segmenters", "diagnostics"])
