"""Tokenizers and models as every script loads and saves them: the tokenizer and config loaders (and
--config_overrides' check), a model's weights (TensorFlow's, or PyTorch's safetensors read without PyTorch; counted
and fingerprinted), the architectures tested here, the copy that 🤗 Transformers 5 loads with PyTorch, and the model
card. 🤗 Transformers and TensorFlow are imported inside the functions: prepare_tfrecord_shards.py loads a tokenizer
without them.
"""

import argparse
import copy
import functools
import hashlib
import json
import logging
import os

from shards import vocabulary_fingerprint
from utils import UserError, finite_float, is_gcs_path, local_copy

logger = logging.getLogger("models")


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


def with_typed_pairs(tokenizer):
    """`tokenizer`, or where it gives both texts of a pair token type 0 (this pipeline's tokenizers, whose pairs are
    RoBERTa's <s> A </s></s> B </s>), a copy that gives the second text type 1, as BERT's tokenizers do: the
    tokenizer of a model with token-type embeddings pre-trained on pairs (run_mlm.py --objective nsp, sop), saved
    with it, so that fine-tuning encodes pairs as pre-training did. The separator after the first text stays of
    type 0, as BERT's [SEP]."""
    from tokenizers import processors

    processor = json.loads(tokenizer.backend_tokenizer.to_str()).get("post_processor") or {}
    if processor.get("type") != "TemplateProcessing" or any(
            value["type_id"] for item in processor["pair"] for value in item.values()):
        return tokenizer  # Typed already (BERT's), or laid out by a processor of another kind.

    def template(items, second_from):
        return " ".join(("$" if "Sequence" in item else "") + f"{value['id']}:{int(i >= second_from)}"
                        for i, item in enumerate(items) for value in item.values())

    pair = processor["pair"]
    second_from = [i for i, item in enumerate(pair) if "Sequence" in item][0] + 2  # After A and its separator.
    typed = copy.deepcopy(tokenizer)
    typed.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=template(processor["single"], len(processor["single"])), pair=template(pair, second_from),
        special_tokens=[(token["id"], token["ids"][0]) for token in processor["special_tokens"].values()])
    return typed


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


def load_config(name_or_path, flag, advice):
    """AutoConfig.from_pretrained of a local or gs:// folder or file, or a Hub id: the one config loader."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(local_copy(name_or_path))
    except (OSError, ValueError) as err:  # No such folder or id, no config.json, or not a config.
        raise UserError(f"cannot load the model config {name_or_path!r} ({flag}): {err}\n{advice}") from err


def config_changes(before, after):
    """The fields whose values differ between the configs `before` and `after` (their to_dict()), but dropout
    rates, which no weight depends on, where and by which 🤗 Transformers version a config was saved, and the class
    it was saved with (`architectures`: a masked LM, the same with a pair head)."""
    ignored = ("_name_or_path", "transformers_version", "architectures")
    return [key for key in {**before, **after}
            if before.get(key) != after.get(key) and "dropout" not in key and key not in ignored]


def override_config(config, overrides):
    """Applies --config_overrides ("name=value,...", or None) to `config`; returns {field: its value before} of the
    fields it changed but dropout rates (config_changes): those a model whose weights are kept cannot take."""
    if not overrides:
        return {}
    before = config.to_dict()
    try:
        config.update_from_string(overrides)
    except ValueError as err:
        raise UserError(f"bad --config_overrides {overrides!r}: {err}") from err
    return {field: before.get(field) for field in config_changes(before, config.to_dict())}


def config_overrides(text):
    """An argparse type: --config_overrides as given ("name=value,..."), its rates and sizes checked here; the names
    and the other values are checked once the config is loaded (run_mlm.py's model_config). A dropout rate of 1 or
    more, a size of 0, or a number that is NaN or infinite would train a model that cannot learn, or fail deep in
    Keras."""
    for name, _, value in (pair.partition("=") for pair in text.split(",")):
        try:
            finite_float(value)
        except ValueError:  # Numbers only: a value may be a name (gelu), None or true.
            pass
        except argparse.ArgumentTypeError as err:
            raise argparse.ArgumentTypeError(f"{name} {err}") from None
        if "dropout" in name and value != "None" and not 0 <= float(value) < 1:
            raise argparse.ArgumentTypeError(f"{name} is a dropout rate: it must be in [0, 1), got {value}")
        if (name.endswith("_size") or name.startswith("num_") or name == "max_position_embeddings") \
                and not int(value) > 0:
            raise argparse.ArgumentTypeError(f"{name} must be a positive number, got {value}")
    return text


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


def refuse_a_tokenizer_not_the_models(start, tokenizer_name, config, tokenizer):
    """Stops unless `tokenizer` (run_mlm.py's --tokenizer `tokenizer_name`, which the shards were checked against)
    is the model's own, the model `start` of `config` (--model_name_or_path): another vocabulary would give every id
    the embedding of another token. The model's tokenizer, where its folder has one, must have the same tokens at
    the same ids, special ones included; else the sizes and the pad id must fit."""
    from transformers import AutoTokenizer

    try:
        own = AutoTokenizer.from_pretrained(local_copy(start))
    except (OSError, ValueError):  # A model folder without tokenizer files.
        own = None
        logger.warning("The model %s has no tokenizer to compare --tokenizer with: only its size is checked.", start)

    if own is None:
        if len(tokenizer) <= config.vocab_size and tokenizer.pad_token_id == config.pad_token_id:
            return
        difference = (f"{len(tokenizer)} tokens and pad id {tokenizer.pad_token_id}, the model {config.vocab_size} "
                      f"embeddings and pad id {config.pad_token_id}")
    else:
        difference = tokenizer_difference(tokenizer, own, "the model's")
    if difference is None:
        return
    raise UserError(
        f"--tokenizer {tokenizer_name!r} is not the tokenizer of the model {start!r}: {difference}. Its ids would "
        "mean other tokens to the model. Drop --tokenizer (the model's is the default), and write the shards with "
        f"the model's tokenizer: prepare_tfrecord_shards.py --tokenizer_name_or_path {start} ...")


def tokenizer_difference(tokenizer, other, whose):
    """What makes `tokenizer` another tokenizer than `other` (`whose`: "the model's"), or None where both give every
    token the same id, special ones in the same roles: another vocabulary of the same size keeps every shape and
    changes what every id means."""
    def special_ids(tokenizer):
        return {name: getattr(tokenizer, name + "_token_id") for name in ("pad", "mask", "bos", "eos", "unk")}

    if vocabulary_fingerprint(other.backend_tokenizer) != vocabulary_fingerprint(tokenizer.backend_tokenizer):
        return (f"{len(tokenizer)} tokens, {whose} {len(other)}" if len(other) != len(tokenizer)
                else f"{len(tokenizer)} tokens as {whose}, but other tokens or ids")
    if special_ids(tokenizer) != special_ids(other):
        return f"special tokens at other ids ({special_ids(tokenizer)}, {whose} {special_ids(other)})"
    return None


# ----------------------------------------------------------------------------------------------------------------
# Weights, and the copy for 🤗 Transformers 5


# The model types that tests/test_architectures.py trains, resumes, fine-tunes and converts exactly (the README's
# table): save_pytorch_copy writes no copy of any other.
ARCHITECTURES = ("albert", "bert", "camembert", "convbert", "deberta", "deberta-v2", "distilbert", "electra", "mpnet",
                 "roberta", "roberta-prelayernorm", "xlm-roberta")


# A model's copy for 🤗 Transformers 5, which has no TensorFlow: a complete model folder inside the TensorFlow one.
# Not beside tf_model.h5: Transformers 4.57's TensorFlow loader prefers any model.safetensors, and fails on these.
PYTORCH_SUBFOLDER = "pytorch"

# Where an ELECTRA pair keeps its generator, inside the folder of its discriminator (run_mlm.py's --output_dir, and
# the config folder beside its checkpoints).
ELECTRA_GENERATOR = "generator"


def saved_generator(name_or_path):
    """The folder of the generator saved beside the ELECTRA discriminator `name_or_path` (local or gs://); None where
    there is none (a discriminator from elsewhere, the Hub's among them, or a partial copy), or no discriminator."""
    import tensorflow as tf

    folder = name_or_path and os.path.join(name_or_path, ELECTRA_GENERATOR)
    return folder if folder and tf.io.gfile.isdir(folder) else None


def load_pretrained_model(model_class, name_or_path, flag, config, new_head=False):
    """`model_class` (a 🤗 TF…For… class) of `config`, with the weights of a local or gs:// model folder or a Hub
    id, named by the option `flag`: TensorFlow's (tf_model.h5) as from_pretrained loads them, else PyTorch's
    (model.safetensors, in one file or sharded with an index): this pipeline's PyTorch copies, most Hub models.
    Both kinds of weights answer to the same checks (check_loaded_weights): with `new_head`, the head may be missing
    from the weights (a classifier made from a masked LM); the encoder never. A weights file that cannot be read
    (cut short) stops with its name."""
    from transformers.utils import cached_file
    from transformers.utils import logging as transformers_logging

    local_path = local_copy(name_or_path)
    find = functools.partial(cached_file, local_path, _raise_exceptions_for_missing_entries=False,
                             _raise_exceptions_for_connection_errors=False)
    tensorflow_weights = find("tf_model.h5") or find("tf_model.h5.index.json")
    if tensorflow_weights:
        # 🤗's own report of missing and unused layers is silenced: check_loaded_weights says it in our words.
        tf_loader_logger = transformers_logging.get_logger("transformers.modeling_tf_utils")
        level = tf_loader_logger.level
        tf_loader_logger.setLevel(logging.ERROR)
        try:
            # Not use_safetensors: a model.safetensors beside tf_model.h5 (on the Hub) would take precedence, and
            # fail.
            model, info = model_class.from_pretrained(local_path, config=config, use_safetensors=False,
                                                      output_loading_info=True)
        except OSError as err:  # 🤗's "Unable to load weights from h5 file": not a whole HDF5 file.
            raise damaged_weights_error(name_or_path, flag, os.path.basename(tensorflow_weights), err) from err
        finally:
            tf_loader_logger.setLevel(level)
        # Layer names here ("roberta", "lm_head"), weight names from PyTorch's files: both start with the layer's.
        check_loaded_weights(model, name_or_path, flag, info["missing_keys"], info["unexpected_keys"], new_head)
        return model
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
    load_pytorch_weights(model, files if index else [single], name_or_path, new_head, flag)
    return model


def damaged_weights_error(name_or_path, flag, file_name, error):
    """The UserError for a weights file of the model `name_or_path` that cannot be read: most often one cut short."""
    return UserError(f"cannot read the weights file {file_name} of {name_or_path!r} ({flag}): it is damaged or "
                     f"incomplete, as a copy that was interrupted or a disk that was full leaves it "
                     f"({type(error).__name__}: {error}). Copy the model folder again from where it came from, or "
                     "save the model again (run_mlm.py and run_classification.py save it at their end; export_model.py "
                     "makes one from a run's last checkpoint).")


def load_pytorch_weights(model, files, name_or_path, new_head=False, flag="--model_name_or_path"):
    """Loads PyTorch-format safetensors `files` into the built TF `model`, by 🤗 Transformers' own PyTorch-to-TF
    name mapping and transposes, refusing weights that are missing or of another shape. Transformers 4.57's
    from_pretrained hands these files to that loader as open archives, which it iterates as dicts (TypeError:
    'builtins.safe_open' object is not iterable); given numpy arrays, it loads them unchanged, without PyTorch."""
    import tensorflow as tf
    from safetensors import SafetensorError
    from safetensors.numpy import load_file
    from transformers.modeling_tf_pytorch_utils import load_pytorch_state_dict_in_tf2_model

    state_dict = {}
    for file in files:
        try:
            state_dict.update(load_file(file))
        except SafetensorError as err:  # "incomplete metadata, file not fully covered": the file was cut short.
            raise damaged_weights_error(name_or_path, flag, os.path.basename(file), err) from err
    problem = f"the PyTorch weights of {name_or_path!r} do not fit a {type(model).__name__} of their config"
    try:
        _, info = load_pytorch_state_dict_in_tf2_model(
            model, state_dict, tf_inputs=False, allow_missing_keys=True, output_loading_info=True,
            skip_logger_warnings=True, tf_to_pt_weight_rename=getattr(model, "tf_to_pt_weight_rename", None))
    except (ValueError, tf.errors.InvalidArgumentError) as err:  # A weight's shape; the message gives both.
        raise UserError(f"{problem}: a weight has another shape ({err}). {FIT_ADVICE}") from err
    check_loaded_weights(model, name_or_path, flag, info["missing_keys"], info["unexpected_keys"], new_head)


FIT_ADVICE = "Pass a model folder of this architecture, with its head (config.json's \"architectures\")."


def check_loaded_weights(model, name_or_path, flag, missing, unexpected, new_head):
    """Stops when the weights of `name_or_path` leave part of `model` at random: its encoder always, its head
    unless `new_head`: True for a new head (run_classification.py's new classifier), or parts of the names of the
    weights that may start anew, wherever they are (run_mlm.py's pooler and pair head, for a masked LM continued on
    sentence pairs). Logs the weights left out, and the new ones. `missing` and `unexpected` are 🤗's names, of
    layers (TensorFlow's weights) or of weights (PyTorch's).

    A model without the head asked for is refused, not started with a random one: given to run_mlm.py, a classifier
    (run_classification.py's folder, its config's "architectures" RobertaForSequenceClassification) would continue
    pre-training with a new LM head, the first evaluations measuring that head rather than the model, and its first
    gradients rewriting the encoder. That is almost always the wrong folder: the masked LM it was fine-tuned from
    is the one meant, and a run of hours on a mistake is what a user least wants."""
    name = type(model).__name__
    prefix = model.base_model_prefix
    new = [key for key in missing if not isinstance(new_head, bool) and any(part in key for part in new_head)]
    encoder = [key for key in missing if key not in new and (key == prefix or key.startswith(prefix + "."))]
    head = [key for key in missing if key not in encoder and key not in new]
    if encoder:
        raise UserError(f"the weights of {name_or_path!r} ({flag}) do not fit a {name} of their config: "
                        f"{len(encoder)} weights of its encoder are missing ({', '.join(encoder[:5])}"
                        f"{', ...' if len(encoder) > 5 else ''}). {FIT_ADVICE}")
    if head and new_head is not True:
        holds = model.config.architectures or ["model"]
        head_layers = sorted({key.split(".")[0] for key in head})  # The same names from either kind of weights.
        raise UserError(f"{name_or_path!r} ({flag}) holds a {', '.join(holds)} without the head of a {name}: its "
                        f"weights have no {', '.join(head_layers)}. Starting that head from random weights would "
                        "train a new head, not continue the model. Pass the model folder that has that head, such as "
                        "the masked-LM folder a classifier was fine-tuned from (the --output_dir of run_mlm.py).")
    if unexpected:
        logger.warning("Weights of %s that a %s does not use, left out: %s", name_or_path, name,
                       ", ".join(sorted(unexpected)[:10]))
    if head:
        logger.info("A new %s head, from random weights: %s", name, ", ".join(head))
    if new:
        logger.warning("%s has no %s: a %s starts them from random weights.", name_or_path, ", ".join(sorted(new)),
                       name)


def unique_weights(*models):
    """The weights of `models`, each once: ELECTRA's discriminator and generator share their embeddings."""
    seen = set()
    return [weight for model in models for weight in model.weights
            if id(weight) not in seen and not seen.add(id(weight))]


def count_parameters(*models):
    return sum(int(weight.shape.num_elements()) for weight in unique_weights(*models))


def weights_fingerprint(*models):
    """A short hash of every weight's bytes: the hosts of a multi-host run must print the same one."""
    digest = hashlib.sha256()
    for weight in unique_weights(*models):
        digest.update(weight.numpy().tobytes())
    return digest.hexdigest()[:16]


def save_tokenizer(tokenizer, folder, model_class):
    """tokenizer.save_pretrained(folder), the tokenizer saying which inputs the model takes: the names of its own
    (model_input_names, by default input_ids, token_type_ids and attention_mask) that `model_class`'s call accepts.
    Else 🤗's TensorFlow pipelines hand DistilBERT and MPNet, which have no token types, token_type_ids they refuse
    (ValueError: The following keyword arguments are not supported by this model). Without a `model_class` (an
    architecture that 🤗 has no TensorFlow masked LM of), the tokenizer is saved as it is."""
    import inspect

    if model_class is None:
        tokenizer.save_pretrained(folder)
        return
    accepted = inspect.signature(model_class.call).parameters
    tokenizer = copy.deepcopy(tokenizer)  # The caller's tokenizer goes on as it was.
    tokenizer.model_input_names = [name for name in tokenizer.model_input_names if name in accepted]
    tokenizer.init_kwargs["model_input_names"] = tokenizer.model_input_names  # What save_pretrained writes.
    tokenizer.save_pretrained(folder)


def save_model_folder(model, tokenizer, folder):
    """The 🤗 TF `model` and its `tokenizer` into `folder` (save_tokenizer), with their copy for PyTorch
    (save_pytorch_copy): what run_mlm.py, run_classification.py and export_model.py save."""
    model.save_pretrained(folder)
    save_tokenizer(tokenizer, folder, type(model))
    save_pytorch_copy(model, tokenizer, folder)


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
    save_tokenizer(tokenizer, pytorch_dir, type(model))
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
