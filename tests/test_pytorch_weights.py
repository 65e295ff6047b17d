"""models.load_pretrained_model on folders of PyTorch weights only (model.safetensors, one file or sharded with an
index), made here without PyTorch from tiny TF models: every weight comes back bit for bit, for each architecture
family; missing or misshapen weights are refused; and, when PYTORCH_PYTHON names a Python with 🤗 Transformers 5 and
PyTorch (`make test-pytorch`), a folder that PyTorch itself saved, sharded, loads with PyTorch's logits."""

import json
import os
import subprocess

import numpy as np
import pytest

ARCHITECTURES = {
    "roberta": dict(max_position_embeddings=40),
    "bert": dict(max_position_embeddings=40),
    "xlm-roberta": dict(max_position_embeddings=40),
    "deberta-v2": dict(max_position_embeddings=40, relative_attention=True, position_biased_input=False,
                       pos_att_type=["p2c", "c2p"]),
}


def tiny_config(model_type, **overrides):
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type, **{
        **dict(vocab_size=120, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
               pad_token_id=1), **ARCHITECTURES[model_type], **overrides})


def pytorch_only_folder(model, folder, shards=1):
    """The PyTorch copy of `model` (models.save_pytorch_copy) moved to `folder`, its weights in `shards` files with
    an index as save_pretrained writes them when there are several."""
    from safetensors.numpy import load_file, save_file

    from models import save_pytorch_copy

    class NoTokenizer:  # save_pytorch_copy saves a tokenizer (models.save_tokenizer); these tests need none.
        model_input_names, init_kwargs = ["input_ids", "attention_mask"], {}

        def save_pretrained(self, folder):
            pass

    save_pytorch_copy(model, NoTokenizer(), str(folder))
    folder = folder / "pytorch"
    if shards > 1:
        tensors = load_file(folder / "model.safetensors")
        os.remove(folder / "model.safetensors")
        names = sorted(tensors)
        weight_map = {}
        for index in range(shards):
            file = f"model-{index + 1:05d}-of-{shards:05d}.safetensors"
            part = names[index::shards]
            save_file({name: tensors[name] for name in part}, folder / file, metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(part, file))
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder


def built(model_class, config):
    model = model_class.from_config(config)
    model.build_in_name_scope()
    return model


INPUTS = dict(input_ids=np.array([[0, 5, 17, 99, 4, 2], [0, 7, 8, 2, 1, 1]]),
              attention_mask=np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]]))


@pytest.mark.parametrize("shards", [1, 3])
@pytest.mark.parametrize("model_type", sorted(ARCHITECTURES))
def test_pytorch_weights_load_bit_for_bit(model_type, shards, tmp_path):
    from transformers import TFAutoModelForMaskedLM

    from devices import set_seed
    from models import load_pretrained_model

    config = tiny_config(model_type)
    set_seed(1)
    original = built(TFAutoModelForMaskedLM, config)
    folder = pytorch_only_folder(original, tmp_path, shards)
    assert not (folder / "tf_model.h5").exists()
    set_seed(2)  # Other random weights, which the loader must replace every one of.
    loaded = load_pretrained_model(TFAutoModelForMaskedLM, str(folder), "--model_name_or_path", config)
    # The same weights in the same order (names differ in their first part, the model instance's name).
    assert [weight.name.split("/", 1)[1] for weight in loaded.weights] == \
        [weight.name.split("/", 1)[1] for weight in original.weights]
    for mine, theirs in zip(loaded.weights, original.weights):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy(), err_msg=mine.name)
    np.testing.assert_array_equal(loaded(INPUTS).logits.numpy(), original(INPUTS).logits.numpy())


def test_a_classifier_from_masked_lm_weights_gets_a_new_head_only(tmp_path):
    from transformers import TFAutoModelForMaskedLM, TFAutoModelForSequenceClassification

    from models import load_pretrained_model

    config = tiny_config("roberta")
    masked_lm = built(TFAutoModelForMaskedLM, config)
    folder = pytorch_only_folder(masked_lm, tmp_path)
    classifier = load_pretrained_model(TFAutoModelForSequenceClassification, str(folder), "--model_name_or_path",
                                       tiny_config("roberta", num_labels=3), new_head=True)
    encoder = {weight.name.split("/", 1)[1]: weight.numpy() for weight in masked_lm.roberta.weights}
    assert len(classifier.roberta.weights) == len(encoder)
    assert all(np.array_equal(weight.numpy(), encoder[weight.name.split("/", 1)[1]])
               for weight in classifier.roberta.weights)


def test_missing_and_misshapen_weights_are_refused(tmp_path):
    from transformers import TFAutoModelForMaskedLM, TFAutoModelForSequenceClassification

    from models import load_pretrained_model
    from utils import UserError

    config = tiny_config("roberta")
    folder = pytorch_only_folder(built(TFAutoModelForSequenceClassification, config), tmp_path)
    with pytest.raises(UserError, match=r"holds a model without the head of a "
                                        r"TFRobertaForMaskedLM: its weights have no lm_head\. .*Pass the model "
                                        r"folder that has that head"):
        load_pretrained_model(TFAutoModelForMaskedLM, str(folder), "--model_name_or_path", config)
    with pytest.raises(UserError, match=r"a weight has another shape \(cannot reshape array of size 1920 into "
                                        r"shape \(130,16\)\)"):
        load_pretrained_model(TFAutoModelForMaskedLM, str(folder), "--model_name_or_path",
                              tiny_config("roberta", vocab_size=130))
    os.remove(folder / "model.safetensors")
    (folder / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(UserError, match="holds no weights that TensorFlow can load.*pytorch_model.bin needs "
                                        "PyTorch"):
        load_pretrained_model(TFAutoModelForMaskedLM, str(folder), "--model_name_or_path", config)


# A tiny RoBERTa saved by PyTorch itself in Transformers 5, in shards: the folder a Hub model is. Prints PyTorch's
# logits for INPUTS.
SAVE_WITH_PYTORCH = """
import json, sys, torch
from transformers import RobertaConfig, RobertaForMaskedLM
torch.manual_seed(0)
config = RobertaConfig(vocab_size=120, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=32, max_position_embeddings=40, pad_token_id=1)
model = RobertaForMaskedLM(config).eval()
model.save_pretrained(sys.argv[1], max_shard_size="20KB")
inputs = json.loads(sys.argv[2])
with torch.no_grad():
    logits = model(**{name: torch.tensor(value) for name, value in inputs.items()}).logits
print(json.dumps(logits.tolist()))
"""


@pytest.mark.skipif(not os.environ.get("PYTORCH_PYTHON"), reason="needs PYTORCH_PYTHON (make test-pytorch)")
def test_transformers_5_pytorch_folder_loads_with_pytorchs_logits(tmp_path):
    from transformers import AutoConfig, TFAutoModelForMaskedLM

    from models import load_pretrained_model

    inputs = {name: value.tolist() for name, value in INPUTS.items()}
    result = subprocess.run([os.environ["PYTORCH_PYTHON"], "-c", SAVE_WITH_PYTORCH, str(tmp_path),
                             json.dumps(inputs)], capture_output=True, text=True, check=True)
    assert (tmp_path / "model.safetensors.index.json").exists()  # Sharded, as large Hub models are.
    model = load_pretrained_model(TFAutoModelForMaskedLM, str(tmp_path), "--model_name_or_path",
                                  AutoConfig.from_pretrained(tmp_path))
    np.testing.assert_allclose(model(INPUTS).logits.numpy(), json.loads(result.stdout), atol=1e-5)


def test_the_scripts_take_the_pytorch_copy_of_a_model_folder(pretrained_model_dir, tmp_path):
    import transformers

    import run_classification
    from helpers import run_main
    from test_export_model import assert_same_weights

    pytorch_dir = pretrained_model_dir / "pytorch"
    masked_lm = transformers.TFAutoModelForMaskedLM.from_pretrained(pretrained_model_dir)
    args = run_classification.parse_args(["--model_name_or_path", str(pytorch_dir), "--train_file", "unused.csv"])
    tokenizer = transformers.AutoTokenizer.from_pretrained(pytorch_dir)
    classifier = run_classification.build_model(
        args, run_classification.classification_config(args, ["a", "b"], tokenizer))
    encoder = {weight.name.split("/", 1)[1]: weight.numpy() for weight in masked_lm.roberta.weights}
    assert len(classifier.roberta.weights) == len(encoder)
    assert all(np.array_equal(weight.numpy(), encoder[weight.name.split("/", 1)[1]])
               for weight in classifier.roberta.weights)

    # export_model.py makes a complete model folder of it: TensorFlow's weights, the PyTorch copy in pytorch/ only.
    run_main("export_model.py", pytorch_dir, "--output_dir", tmp_path / "exported")
    assert (tmp_path / "exported" / "tf_model.h5").exists()
    assert not (tmp_path / "exported" / "model.safetensors").exists()
    assert_same_weights(tmp_path / "exported", pretrained_model_dir)
