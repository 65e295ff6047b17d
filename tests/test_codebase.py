"""The codebase itself: the modules import one another without cycles, every third-party module they import is
named in a requirements file (not only brought by another package's dependencies), every script's --help answers
without starting TensorFlow, and TensorFlow started after utils brings no Keras 3."""

import ast
import os
import re
import subprocess
import sys
from importlib import metadata

import pytest

from helpers import REPO

pytestmark = pytest.mark.fast

MODULES = {path.stem: path for path in REPO.glob("*.py")}
REQUIREMENT_FILES = ("requirements-libraries.txt", "requirements.txt", "requirements-beam.txt")


def imported_modules(path):
    """The top-level names of every module that the file at `path` imports, at its top or inside functions."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.fast
def test_no_module_imports_one_that_imports_it():
    graph = {name: imported_modules(path) & set(MODULES) - {name} for name, path in MODULES.items()}
    for start in graph:
        reached, frontier = set(), set(graph[start])
        while frontier:
            reached |= frontier
            frontier = {name for module in frontier for name in graph[module]} - reached
        assert start not in reached, f"{start} imports a module that imports it back: {sorted(reached)}"


@pytest.mark.fast
def test_every_third_party_module_is_a_named_requirement():
    named = set()
    for file in REQUIREMENT_FILES:
        for line in (REPO / file).read_text().splitlines():
            if match := re.match(r"([A-Za-z0-9_.-]+)", line.split("#")[0].strip()):
                named.add(re.sub(r"[-_.]+", "-", match.group(1)).lower())
    distributions = metadata.packages_distributions()  # {"google": ["google-cloud-storage", ...], ...}
    unnamed = {}
    for name, path in MODULES.items():
        if name == "setup":  # Beam's staging runs it with setuptools, which is what runs any setup.py.
            continue
        for module in imported_modules(path) - set(MODULES):
            if module in distributions:  # Not the standard library.
                providers = {re.sub(r"[-_.]+", "-", dist).lower() for dist in distributions[module]}
                if not providers & named:
                    unnamed.setdefault(module, []).append(path.name)
    assert not unnamed, f"imported but named in no requirements file: {unnamed}"


@pytest.mark.fast
def test_setup_py_ships_every_module_that_the_beam_workers_import():
    shipped = set(re.search(r"py_modules=\[([^]]*)\]", (REPO / "setup.py").read_text()).group(1).replace('"', "")
                  .replace(" ", "").replace("\n", "").split(","))
    needed, frontier = set(), {"prepare_tfrecord_shards", "beam_pipeline"}
    while frontier:
        needed |= frontier
        frontier = {name for module in frontier for name in imported_modules(MODULES[module]) & set(MODULES)} - needed
    assert needed <= shipped, f"setup.py does not ship {sorted(needed - shipped)} to Dataflow's workers"


@pytest.mark.fast
@pytest.mark.parametrize("script", ["train_unigram.py", "prepare_tfrecord_shards.py", "run_mlm.py",
                                    "run_classification.py", "export_model.py"])
def test_help_answers_without_importing_tensorflow(script):
    # -X importtime lists every module imported. TensorFlow takes seconds to start and logs lines of its own.
    result = subprocess.run([sys.executable, "-X", "importtime", str(REPO / script), "--help"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.startswith(f"usage: {script}")
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import")}
    assert "tensorflow" not in imported and "tf_keras" not in imported


def test_tensorflow_imported_after_utils_brings_no_keras_3():
    # The test session sets TF_USE_LEGACY_KERAS itself: this process starts without it, as a user's script does.
    env = {name: value for name, value in os.environ.items() if name != "TF_USE_LEGACY_KERAS"}
    result = subprocess.run([sys.executable, "-c", "import sys, utils, tensorflow as tf, tf_keras; "
                             "print('keras' in sys.modules, tf.keras.Model is tf_keras.Model)"],
                            capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
    assert result.stdout.split() == ["False", "True"], result.stderr[-3000:]


@pytest.mark.fast
def test_every_module_imports_only_those_below_it_in_the_readmes_layout_table():
    section = README_LAYOUT.search((REPO / "README.md").read_text()).group(1)
    rows = [re.findall(r"`(\w+)\.py`", row.split("|")[1]) for row in section.splitlines() if row.startswith("| ")]
    scripts = ["train_unigram", "prepare_tfrecord_shards", "run_mlm", "run_classification", "export_model"]
    order = [names or scripts for names in rows[1:]]  # Past the header row; "the five scripts" names none.
    placed = {name: floor for floor, names in enumerate(order) for name in names}
    assert set(placed) == set(MODULES) - {"setup"}, "the table names every module once"
    for name, floor in placed.items():
        above = {module for module in imported_modules(MODULES[name]) & set(MODULES) if placed[module] <= floor}
        assert above <= {name} or floor == 0 and above <= set(scripts), f"{name} imports {sorted(above)}, not below it"


README_LAYOUT = re.compile(r"## How the code is laid out\n(.*?)\n## ", re.DOTALL)


@pytest.mark.fast
def test_every_script_reads_in_one_sitting_and_the_trainers_share_one_step():
    # A script is the story of its step: long ones hide it. The trainers of every objective take their step, its
    # gradient accumulation and its metric means from masked_lm.PretrainingTrainer, not from copies of their own.
    for script in ("train_unigram.py", "prepare_tfrecord_shards.py", "run_mlm.py", "run_classification.py",
                   "export_model.py"):
        assert len((REPO / script).read_text().splitlines()) < 600, script
    defined = {}
    for name in ("masked_lm", "electra"):
        for node in ast.walk(ast.parse(MODULES[name].read_text())):
            if isinstance(node, ast.ClassDef):
                defined[node.name] = ({base.id for base in node.bases if isinstance(base, ast.Name)},
                                      {item.name for item in node.body if isinstance(item, ast.FunctionDef)})
    trainers = [name for name in defined if name.endswith("Trainer") and name != "PretrainingTrainer"]
    assert {"MaskedLMTrainer", "SentencePairTrainer", "ElectraTrainer"} <= set(trainers)
    assert {"train_step", "test_step", "_compute_gradients", "metrics"} <= defined["PretrainingTrainer"][1]
    for name in trainers:
        bases, methods = defined[name]
        assert bases & {"PretrainingTrainer", "MaskedLMTrainer"}, name
        assert not methods & {"train_step", "test_step", "_compute_gradients", "metrics"}, name
