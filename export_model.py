#!/usr/bin/env python
"""Make a model folder that 🤗 Transformers 5 loads with PyTorch, from a model this pipeline saved or from a run.

SOURCE is one of:
- a model folder saved by run_mlm.py or run_classification.py (tf_model.h5), with or without its PyTorch copy, or
  a folder of PyTorch weights (model.safetensors: a PyTorch copy, or a model saved by Transformers with PyTorch);
- the --output_dir of a run_mlm.py run, going or interrupted, or its checkpoints folder: its last checkpoint
  becomes the model.

--output_dir gets a complete model folder: the TensorFlow model and its tokenizer as save_pretrained writes them
(what run_classification.py and `pipeline(..., framework="tf")` load), and in pytorch/ the same model for PyTorch
(float32 model.safetensors), made without PyTorch or the Hub. Both may be gs://bucket/folder.

Example:
    python export_model.py mlm-model --output_dir mlm-model-step-3000
"""

import argparse
import logging
import os
import shutil
import sys

import transformers

from models import (ELECTRA_GENERATOR, PYTORCH_SUBFOLDER, load_config, load_pretrained_model, load_tokenizer,
                    save_model_folder, save_pytorch_copy, save_tokenizer)
from utils import (UserError, check_gcs_path, check_output_dir, local_copy, refuse_an_output_that_is_read,
                   save_folder)

logger = logging.getLogger("export_model")

# The weights of a model folder, TensorFlow's or PyTorch's (which run_mlm.py's checkpoints are not).
MODEL_WEIGHTS = ("tf_model.h5", "model.safetensors", "model.safetensors.index.json")
PASS_A_MODEL_FOLDER = ("Pass a model folder saved by run_mlm.py or run_classification.py, or the --output_dir of a "
                       "run_mlm.py run.")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", metavar="SOURCE",
                        help="A model folder saved by run_mlm.py or run_classification.py, or the --output_dir of a "
                             "run_mlm.py run that has checkpoints (local or gs://).")
    parser.add_argument("--output_dir", required=True, help="The new model folder (local or gs://).")
    parser.add_argument("--overwrite", action="store_true", help="Write into --output_dir even if it is not empty.")
    return parser.parse_args()


def main(args):
    import tensorflow as tf  # Here, not at the top: --help and a bad flag need not wait seconds for it.

    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    refuse_an_output_that_is_read(args.output_dir, [args.source])
    check_gcs_path(args.source)
    check_gcs_path(args.output_dir, write=True)
    if not tf.io.gfile.isdir(args.source):
        raise UserError(f"SOURCE {args.source!r} is not a folder. {PASS_A_MODEL_FOLDER}")
    check_output_dir(args.output_dir, args.overwrite)
    if any(tf.io.gfile.exists(os.path.join(args.source, name)) for name in MODEL_WEIGHTS):
        write, origin = from_model_folder(args.source)
    else:
        write, origin = from_last_checkpoint(args.source)
    save_folder(args.output_dir, write, f"The model of {origin}, with its PyTorch copy in {PYTORCH_SUBFOLDER}/,")


def from_model_folder(source):
    """(write, origin) for a saved model: its files (config, tokenizer, model card, results), the TensorFlow model
    (from PyTorch weights where it has no tf_model.h5) and a PyTorch copy."""
    local_dir = local_copy(source)  # Its files, not its sub-folders (checkpoints, logs).
    config = load_config(source, "SOURCE", PASS_A_MODEL_FOLDER)
    # No TFAuto class picks the head from config.architectures: TFRobertaForMaskedLM for RobertaForMaskedLM.
    model = load_pretrained_model(getattr(transformers, "TF" + config.architectures[0]), source, "SOURCE", config)
    tokenizer = load_tokenizer(source, "SOURCE", PASS_A_MODEL_FOLDER)
    pytorch_weights = [name for name in os.listdir(local_dir) if name.startswith("model") and ".safetensors" in name]

    def write(folder):  # Never into SOURCE itself (main refuses it): it is what is read.
        os.makedirs(folder, exist_ok=True)
        for name in os.listdir(local_dir):
            if os.path.isfile(os.path.join(local_dir, name)) and name not in pytorch_weights:
                shutil.copy(os.path.join(local_dir, name), folder)
        if pytorch_weights:
            model.save_pretrained(folder)
        # Anew over the copied files: a folder saved before save_tokenizer existed did not name the model's inputs.
        save_tokenizer(tokenizer, folder, type(model))
        save_pytorch_copy(model, tokenizer, folder)

    return write, source


def from_last_checkpoint(source):
    """(write, origin) for a run_mlm.py run: the model of its last checkpoint (an ELECTRA run's discriminator; not
    its generator), with the config and tokenizer beside it, and a PyTorch copy."""
    import tensorflow as tf
    from transformers import TFAutoModelForMaskedLM, TFElectraForPreTraining

    from run_folder import check_checkpoint, last_checkpoint  # Here: it imports TensorFlow.

    # SOURCE is the run's --output_dir, or its checkpoints folder (which holds the index file "checkpoint").
    is_checkpoint_dir = tf.io.gfile.exists(os.path.join(source, "checkpoint"))
    checkpoint_dir = source if is_checkpoint_dir else os.path.join(source, "checkpoints")
    checkpoint = last_checkpoint(checkpoint_dir)
    if checkpoint is None:
        raise UserError(f"{source!r} is neither a model folder (it has no tf_model.h5) nor the --output_dir "
                        "of a run_mlm.py run with a checkpoint (it has no checkpoints/checkpoint). Pass a folder "
                        "saved by run_mlm.py or run_classification.py, or a run_mlm.py --output_dir once its first "
                        "checkpoint is saved (every --checkpoint_every_steps).")
    config_dir = os.path.join(checkpoint_dir, "config")
    if not tf.io.gfile.exists(os.path.join(config_dir, "config.json")):
        raise UserError(f"the run in {source!r} has checkpoints but not the config and tokenizer they belong "
                        f"to ({config_dir}), which run_mlm.py saves when a run starts or resumes. Run the same "
                        "run_mlm.py command again: it resumes from the last checkpoint and saves them; then stop it "
                        "(Ctrl-C) or let it finish.")
    check_checkpoint(checkpoint, checkpoint_dir)
    tokenizer = load_tokenizer(config_dir, "SOURCE", PASS_A_MODEL_FOLDER)
    # A run of --objective electra keeps its generator's config in generator/: its model is the discriminator. Else
    # the config names the class of the checkpoints' model (save_checkpoints_config), a masked LM where it did not.
    config = load_config(config_dir, "SOURCE", PASS_A_MODEL_FOLDER)
    if tf.io.gfile.exists(os.path.join(config_dir, ELECTRA_GENERATOR, "config.json")):
        model_class = TFElectraForPreTraining
    elif config.architectures:
        model_class = getattr(transformers, "TF" + config.architectures[0])
    else:
        model_class = TFAutoModelForMaskedLM
    model = model_class.from_config(config)
    model.build_in_name_scope()
    # The checkpoint also holds the optimizer's state, which a model does not need.
    status = tf.train.Checkpoint(model=model).restore(checkpoint).expect_partial()
    status.assert_existing_objects_matched()  # Every weight of the model came from the checkpoint.
    logger.info("Restored %s", checkpoint)

    def write(folder):
        save_model_folder(model, tokenizer, folder)

    return write, checkpoint


if __name__ == "__main__":
    try:
        main(parse_args())
    except UserError as err:  # Bad input: its message alone, without a traceback.
        sys.exit(f"error: {err}")
