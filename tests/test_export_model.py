"""The PyTorch copy that run_mlm.py and run_classification.py save (and export_model.py makes): every weight checked
by a forward pass computed here with numpy from the PyTorch-named weights, where a wrong name or a missing transpose
changes the logits; export from a run's last checkpoint and from a folder saved without a copy; bad input; and, when
PYTORCH_PYTHON names a Python with 🤗 Transformers 5 and PyTorch (`make test-pytorch`), a real load there."""

import json
import math
import os
import shutil
import subprocess

import numpy as np
import pytest
from safetensors import safe_open

from helpers import REPO, assert_entry_point_error, built_once, run_main, run_script

BANKING77 = REPO / "tests" / "data" / "banking77"
MLM_TEXTS = ["The game was released in <mask> 2011 .", "He was born in the <mask> of London , England ."]
CLASSIFICATION_TEXTS = ["What is the exchange rate for euros?", "My card has not arrived yet", "I lost my card"]


@pytest.fixture(scope="module")
def classifier_dir(pretrained_model_dir, tmp_path_factory):
    """A classifier fine-tuned by run_classification.py from the tiny masked LM, for two epochs (once for all test
    processes: helpers.built_once)."""
    return built_once(tmp_path_factory, "classifier/model", lambda output_dir: run_main(
        "run_classification.py", "--model_name_or_path", pretrained_model_dir, "--train_file", BANKING77 / "train.csv",
        "--test_file", BANKING77 / "test.csv", "--label_column", "category", "--max_length", 32,
        "--per_replica_batch_size", 8, "--learning_rate", 5e-3, "--num_epochs", 2, "--no_tpu", "--output_dir",
        output_dir))


class Weights:
    """The tensors of a PyTorch-format model.safetensors, in float64, remembering which ones were read."""

    def __init__(self, path):
        with safe_open(path, framework="np") as f:
            assert f.metadata() == {"format": "pt"}
            self.tensors = {name: f.get_tensor(name) for name in f.keys()}
        assert all(tensor.dtype == np.float32 for tensor in self.tensors.values())
        self.read = set()

    def __getitem__(self, name):
        self.read.add(name)
        return self.tensors[name].astype(np.float64)


def linear(x, w, name):
    return x @ w[name + ".weight"].T + w[name + ".bias"]  # PyTorch's nn.Linear keeps its weight as (out, in).


def layer_norm(x, w, name, eps):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) * w[name + ".weight"] \
        + w[name + ".bias"]


gelu = np.vectorize(lambda x: 0.5 * x * (1 + math.erf(x / math.sqrt(2))))  # The exact GELU ("gelu").


def roberta_encoder(w, config, input_ids, attention_mask):
    """RoBERTa's last hidden states, computed from the PyTorch weights as its paper and BERT's describe it."""
    eps, pad = config["layer_norm_eps"], config["pad_token_id"]
    positions = np.cumsum(input_ids != pad, axis=1) * (input_ids != pad) + pad  # From pad + 1; pads get pad.
    x = w["roberta.embeddings.word_embeddings.weight"][input_ids] \
        + w["roberta.embeddings.position_embeddings.weight"][positions] \
        + w["roberta.embeddings.token_type_embeddings.weight"][0]
    x = layer_norm(x, w, "roberta.embeddings.LayerNorm", eps)
    batch, length, hidden = x.shape
    heads = config["num_attention_heads"]
    mask = (1.0 - attention_mask[:, None, None, :]) * -1e9
    for i in range(config["num_hidden_layers"]):
        layer = f"roberta.encoder.layer.{i}."
        query, key, value = (linear(x, w, layer + "attention.self." + name).reshape(batch, length, heads, -1)
                             .transpose(0, 2, 1, 3) for name in ("query", "key", "value"))
        scores = query @ key.transpose(0, 1, 3, 2) / math.sqrt(hidden // heads) + mask
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        context = (probs / probs.sum(-1, keepdims=True) @ value).transpose(0, 2, 1, 3).reshape(batch, length, hidden)
        x = layer_norm(x + linear(context, w, layer + "attention.output.dense"), w,
                       layer + "attention.output.LayerNorm", eps)
        x = layer_norm(x + linear(gelu(linear(x, w, layer + "intermediate.dense")), w, layer + "output.dense"), w,
                       layer + "output.LayerNorm", eps)
    return x


def masked_lm_logits(w, config, inputs):
    x = roberta_encoder(w, config, inputs["input_ids"], inputs["attention_mask"])
    x = layer_norm(gelu(linear(x, w, "lm_head.dense")), w, "lm_head.layer_norm", config["layer_norm_eps"])
    return x @ w["roberta.embeddings.word_embeddings.weight"].T + w["lm_head.bias"]  # Tied to the embeddings.


def classifier_logits(w, config, inputs):
    x = roberta_encoder(w, config, inputs["input_ids"], inputs["attention_mask"])
    return linear(np.tanh(linear(x[:, 0], w, "classifier.dense")), w, "classifier.out_proj")  # At <s>.


def tensorflow_logits(model_class, folder, texts):
    import transformers

    inputs = tokenize(folder, texts)
    model = getattr(transformers, model_class).from_pretrained(folder)
    return inputs, model(inputs, training=False).logits.numpy()


def tokenize(folder, texts):
    """The tokenizer's inputs of texts, or of pairs given as [text, text_pair] lists (test_glue.py's)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    pairs = [texts] if isinstance(texts[0], str) else [[text for text, _ in texts], [pair for _, pair in texts]]
    return dict(tokenizer(*pairs, padding=True, return_tensors="np"))


MODELS = {"masked LM": ("TFAutoModelForMaskedLM", MLM_TEXTS, masked_lm_logits),
          "classifier": ("TFAutoModelForSequenceClassification", CLASSIFICATION_TEXTS, classifier_logits)}


def model_folder(model, request):
    return request.getfixturevalue("pretrained_model_dir" if model == "masked LM" else "classifier_dir")


def assert_numpy_forward_gives(expected, pytorch_dir, forward, inputs):
    """The logits computed with numpy from the weights in `pytorch_dir`, each of them used, are `expected`."""
    assert inputs["attention_mask"].min() == 0  # Texts of different lengths: padding is masked.
    w = Weights(pytorch_dir / "model.safetensors")
    logits = forward(w, json.loads((pytorch_dir / "config.json").read_text()), inputs)
    assert w.read == set(w.tensors)  # Every weight was used, none is left over.
    assert expected.std() > 0.01 and np.abs(logits - expected).max() < 1e-4


@pytest.mark.parametrize("model", MODELS)
def test_the_saved_pytorch_copy_gives_tensorflows_logits(model, request):
    folder = model_folder(model, request)
    model_class, texts, forward = MODELS[model]
    inputs, expected = tensorflow_logits(model_class, folder, texts)
    assert_numpy_forward_gives(expected, folder / "pytorch", forward, inputs)
    # The same architecture (and the classifier's label names) and tokenizer as the TensorFlow model.
    assert json.loads((folder / "pytorch" / "config.json").read_text()) == \
        json.loads((folder / "config.json").read_text())
    assert (folder / "pytorch" / "tokenizer.json").read_bytes() == (folder / "tokenizer.json").read_bytes()


@pytest.mark.parametrize("model", MODELS)
def test_every_weight_keeps_its_role_with_all_weights_far_from_their_start(model, request, tmp_path):
    # The tiny models, trained a few steps, still attend almost uniformly: a query or key matrix left untransposed
    # would change their logits by less than the tolerance. Random weights of a larger scale make every one count.
    import transformers
    from transformers import AutoTokenizer

    from export_model import save_pytorch_copy

    folder = model_folder(model, request)
    model_class, texts, forward = MODELS[model]
    tf_model = getattr(transformers, model_class).from_pretrained(folder)
    rng = np.random.default_rng(0)
    for weight in tf_model.weights:
        weight.assign(rng.normal(0, 0.3, weight.shape))
    save_pytorch_copy(tf_model, AutoTokenizer.from_pretrained(folder), tmp_path)
    inputs = tokenize(folder, texts)
    expected = tf_model(inputs, training=False).logits.numpy()
    assert_numpy_forward_gives(expected, tmp_path / "pytorch", forward, inputs)


def test_model_cards_show_both_ways_to_load(pretrained_model_dir, classifier_dir):
    for folder, task in ((pretrained_model_dir, "fill-mask"), (classifier_dir, "text-classification")):
        card = (folder / "README.md").read_text()
        assert f'pipeline("{task}", model="PATH_OR_HUB_ID", model_kwargs=dict(subfolder="pytorch"))' in card
        assert f'pipeline("{task}", model="PATH_OR_HUB_ID", framework="tf", dtype=None)' in card
    card = (classifier_dir / "README.md").read_text()
    assert "text classifier of 6 labels" in card and "- Test: accuracy" in card


def assert_same_weights(folder, expected_folder):
    exported = Weights(folder / "pytorch" / "model.safetensors").tensors
    expected = Weights(expected_folder / "pytorch" / "model.safetensors").tensors
    assert exported.keys() == expected.keys() and all(np.array_equal(exported[k], expected[k]) for k in expected)


def test_a_runs_last_checkpoint_exports_as_the_model_saved_at_that_step(pretrained_model_dir, tmp_path):
    # A run interrupted at its last step, before it saved the model: what is left is what a run writes first.
    run_dir = tmp_path / "run"
    for name in ("checkpoints", "logs"):
        shutil.copytree(pretrained_model_dir / name, run_dir / name)
    run_main("export_model.py", run_dir, "--output_dir", tmp_path / "exported")
    assert_same_weights(tmp_path / "exported", pretrained_model_dir)
    inputs, logits = tensorflow_logits("TFAutoModelForMaskedLM", tmp_path / "exported", MLM_TEXTS)
    assert np.array_equal(logits, tensorflow_logits("TFAutoModelForMaskedLM", pretrained_model_dir, MLM_TEXTS)[1])

    result = run_main("export_model.py", run_dir, "--output_dir", tmp_path / "exported", expect_failure=True)
    assert "error: the output folder" in result.stderr and "pass --overwrite" in result.stderr
    shutil.rmtree(run_dir / "checkpoints" / "config")  # As a run started before run_mlm.py saved them.
    result = run_main("export_model.py", run_dir, "--output_dir", tmp_path / "other", expect_failure=True)
    assert "has checkpoints but not the config and tokenizer" in result.stderr
    assert "Run the same run_mlm.py command again" in result.stderr


def test_a_folder_saved_without_a_pytorch_copy_gets_one(classifier_dir, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(classifier_dir, old, ignore=shutil.ignore_patterns("pytorch", "logs"))
    run_main("export_model.py", old, "--output_dir", tmp_path / "exported")
    assert_same_weights(tmp_path / "exported", classifier_dir)
    exported_files = {path.name for path in (tmp_path / "exported").iterdir()}
    assert exported_files == {path.name for path in old.iterdir()} | {"pytorch"}


@pytest.mark.fast
def test_what_is_neither_a_model_nor_a_run_is_refused(tmp_path):
    result = run_script("export_model.py", tmp_path / "missing", "--output_dir", tmp_path / "out", expect_failure=True)
    assert_entry_point_error(result, f"SOURCE '{tmp_path / 'missing'}' is not a folder")  # From the entry point.
    (tmp_path / "empty").mkdir()
    result = run_main("export_model.py", tmp_path / "empty", "--output_dir", tmp_path / "out", expect_failure=True)
    assert "is neither a model folder (it has no tf_model.h5) nor the --output_dir of a run_mlm.py run" \
        in result.stderr
    assert "Traceback" not in result.stderr


# What Transformers 5 answers, run in PYTORCH_PYTHON: for each model, its loading report, logits and pipeline answers;
# the texts may be pairs, [text, text_pair] lists.
TRANSFORMERS_5 = """
import importlib.util, json, sys
import torch, transformers
from transformers import AutoTokenizer, pipeline

answers = {"tensorflow": importlib.util.find_spec("tensorflow") is not None, "version": transformers.__version__}
for name, model_class, task, folder, texts in json.loads(sys.argv[1]):
    model, report = getattr(transformers, model_class).from_pretrained(folder + "/pytorch", output_loading_info=True)
    pairs = not isinstance(texts[0], str)
    tokenizer_inputs = [[text for text, _ in texts], [pair for _, pair in texts]] if pairs else [texts]
    inputs = AutoTokenizer.from_pretrained(folder + "/pytorch")(*tokenizer_inputs, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**inputs).logits
    pipeline_inputs = [dict(text=text, text_pair=pair) for text, pair in texts] if pairs else texts
    run = pipeline(task, model=folder, model_kwargs=dict(subfolder="pytorch"))
    answers[name] = dict(report={key: list(value) for key, value in report.items()}, logits=logits.tolist(),
                         dtype=str(model.dtype), pipeline=run(pipeline_inputs))
json.dump(answers, sys.stdout)
"""


@pytest.mark.skipif(not os.environ.get("PYTORCH_PYTHON"),
                    reason="needs 🤗 Transformers 5 and PyTorch: `make test-pytorch` builds them and runs it")
def test_transformers_5_with_pytorch_loads_both_models_as_tensorflow_runs_them(pretrained_model_dir, classifier_dir):
    from transformers import pipeline

    models = [("masked LM", "AutoModelForMaskedLM", "fill-mask", str(pretrained_model_dir), MLM_TEXTS),
              ("classifier", "AutoModelForSequenceClassification", "text-classification", str(classifier_dir),
               CLASSIFICATION_TEXTS)]
    result = subprocess.run([os.environ["PYTORCH_PYTHON"], "-c", TRANSFORMERS_5, json.dumps(models)],
                            capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr[-5000:]
    answers = json.loads(result.stdout)
    assert answers["version"].startswith("5.") and not answers["tensorflow"]
    for name, model_class, task, folder, texts in models:
        pytorch = answers[name]
        assert pytorch["report"] == {"missing_keys": [], "unexpected_keys": [], "mismatched_keys": [],
                                     "error_msgs": []}
        assert pytorch["dtype"] == "torch.float32"
        _, logits = tensorflow_logits("TF" + model_class, folder, texts)
        assert np.abs(np.array(pytorch["logits"]) - logits).max() < 1e-4
        tensorflow = pipeline(task, model=folder, framework="tf", dtype=None)(texts)
        assert same_answers(pytorch["pipeline"], tensorflow), (pytorch["pipeline"], tensorflow)


def same_answers(pytorch, tensorflow):
    """The same labels or tokens in the same order, with scores within 1e-4."""
    flat = [(a, b) for x, y in zip(pytorch, tensorflow) for a, b in (zip(x, y) if isinstance(x, list) else [(x, y)])]
    return len(pytorch) == len(tensorflow) and all(
        {k: v for k, v in a.items() if k != "score"} == {k: v for k, v in b.items() if k != "score"}
        and abs(a["score"] - b["score"]) < 1e-4 for a, b in flat)
