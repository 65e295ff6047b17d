"""The README stays true: every pipeline command it shows parses with the script's own flags, and every flag it names
exists."""

import contextlib
import importlib.util
import io
import re
import shlex
import sys

import pytest

from helpers import REPO

SCRIPTS = ("train_unigram.py", "prepare_tfrecord_shards.py", "run_mlm.py", "run_classification.py", "export_model.py")
# Flags the READMEs give to other programs (pip, gcloud, tensorboard, Beam), in prose and tables.
OTHER_PROGRAMS_FLAGS = {"--no-deps", "--find-links", "--force-reinstall", "--dry-run", "--worker", "--zone",
                        "--command", "--version", "--accelerator-type", "--logdir", "--location", "--member",
                        "--role", "--system-site-packages", "--sdk_container_image"}
README = (REPO / "README.md").read_text()
# benchmarks/README.md, the index, and the page of each family of benchmarks.
BENCHMARK_PAGES = sorted((REPO / "benchmarks").glob("*.md"))
COMMAND = re.compile(r"python3?\s+((?:\S+/)?(\w+\.py))\b(.*)")


def scripts_here():
    return [script for script in SCRIPTS if (REPO / script).exists()]


def parse(script, argv, monkeypatch):
    """The script's own parse_args() on `argv`, in this process: its argparse Namespace."""
    monkeypatch.setattr(sys, "argv", [script, *argv])
    return importlib.import_module(script[:-len(".py")]).parse_args()


def help_text(module, program, monkeypatch):
    """What `program --help` prints: the module's parse_args() on --help, in this process."""
    output = io.StringIO()
    monkeypatch.setattr(sys, "argv", [program, "--help"])
    with contextlib.redirect_stdout(output), pytest.raises(SystemExit):
        module.parse_args()
    return output.getvalue()


@pytest.fixture(scope="module")
def help_texts():
    """{script: its --help text}, for the pipeline scripts and the benchmark scripts."""
    with pytest.MonkeyPatch.context() as patch:
        texts = {script: help_text(importlib.import_module(script[:-len(".py")]), script, patch)
                 for script in scripts_here()}
        patch.syspath_prepend(str(REPO / "benchmarks"))  # Where they import common from.
        for path in sorted((REPO / "benchmarks").glob("*.py")):
            spec = importlib.util.spec_from_file_location(f"benchmarks.{path.stem}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            if hasattr(module, "parse_args"):  # common.py is no script.
                texts[f"benchmarks/{path.name}"] = help_text(module, str(path), patch)
    return texts


def readme_commands():
    """(script, arguments) of every command in the README's code blocks that runs a pipeline script."""
    commands = []
    for language, block in re.findall(r"^```(\w*)\n(.*?)^```", README, flags=re.DOTALL | re.MULTILINE):
        if language not in ("", "bash", "sh"):
            continue
        for line in block.replace("\\\n", " ").splitlines():
            for match in COMMAND.finditer(line):
                script, rest = match.group(2), match.group(3)
                if script not in SCRIPTS:
                    continue
                if line[:match.start()].count('"') % 2:  # Inside a quoted --command "...": up to its end.
                    rest = rest.split('"')[0]
                words = []
                for word in shlex.split(rest, comments=True):
                    if word in ("&&", ";", "|") or word.startswith((">", "2>")):
                        break
                    if word != "...":  # An ellipsis stands for flags left out.
                        words.append(word)
                commands.append((script, words))
    return commands


@pytest.mark.fast
def test_readme_shows_each_pipeline_script():
    shown = {script for script, _ in readme_commands()}
    assert shown >= set(scripts_here())


@pytest.mark.fast
@pytest.mark.parametrize("script,argv", readme_commands(), ids=lambda value: value if isinstance(value, str) else "")
def test_every_readme_command_parses(script, argv, monkeypatch, capsys):
    try:
        parse(script, argv, monkeypatch)
    except SystemExit as exit:
        pytest.fail(f"python {script} {shlex.join(argv)}: {capsys.readouterr().err or exit}")


def sections():
    """{heading: text} of the README's "## " sections."""
    parts = re.split(r"^## (.*)$", README, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def named_flags(text):
    """The --flags named in backticks in `text`, outside code blocks: (those in table rows, those elsewhere)."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)
    found = {True: set(), False: set()}
    for line in prose.splitlines():
        for span in re.findall(r"`([^`\n]+)`", line):
            found[line.startswith("|")].update(re.findall(r"(?<![\w-])--[a-z][\w-]*", span))
    return found[True], found[False]


def test_every_flag_the_readme_names_exists(help_texts):
    def known(flag, scripts):
        return any(re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_texts[script]) for script in scripts)

    for heading, text in sections().items():
        # A step's flag tables name its script's flags; prose may name any script's (step 2 tells of run_mlm.py's).
        own = [script for script in help_texts if f"`{script}`" in heading] or list(help_texts)
        in_tables, in_prose = named_flags(text)
        unknown = sorted(flag for flag in in_tables - OTHER_PROGRAMS_FLAGS if not known(flag, own))
        unknown += sorted(flag for flag in in_prose - OTHER_PROGRAMS_FLAGS if not known(flag, help_texts))
        assert not unknown, f"README section {heading!r} names flags that {', '.join(own)} do not have: {unknown}"


@pytest.mark.fast
def test_every_make_target_the_readmes_name_exists():
    targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), flags=re.MULTILINE))
    for readme in (REPO / "README.md", *BENCHMARK_PAGES):
        # A command in a code block (at a line's start) or in backticks: `make glue GLUE=glue_data`.
        named = set(re.findall(r"(?:^|`)make ([a-z][\w-]*)", readme.read_text(), flags=re.MULTILINE))
        missing = sorted(named - targets)
        assert not missing, f"{readme.relative_to(REPO)} names make targets that the Makefile lacks: {missing}"
        assert named or readme.name != "README.md", f"{readme.relative_to(REPO)} names no make target"


def test_every_flag_the_benchmark_pages_name_exists(help_texts):
    for page in BENCHMARK_PAGES:
        in_tables, in_prose = named_flags(page.read_text())
        unknown = sorted(flag for flag in (in_tables | in_prose) - OTHER_PROGRAMS_FLAGS
                         if not any(re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text)
                                    for text in help_texts.values()))
        assert not unknown, f"{page.relative_to(REPO)} names flags that no script has: {unknown}"


def anchor(heading):
    """The anchor GitHub gives a Markdown heading: lower case, punctuation and backticks dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.fast
@pytest.mark.parametrize("page", [REPO / "README.md", *BENCHMARK_PAGES], ids=lambda page: str(page.relative_to(REPO)))
def test_every_link_of_the_readmes_resolves(page):
    # Other files point at the pages' sections by heading: a link to a renamed or moved section fails here.
    for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"^```.*?^```", "", page.read_text(),
                                                          flags=re.DOTALL | re.MULTILINE)):
        if re.match(r"\w+://", target):
            continue
        path, _, fragment = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name} links to {target}: no such file"
        if fragment:
            headings = re.findall(r"^#+ (.*)$", re.sub(r"^```.*?^```", "", linked.read_text(),
                                                       flags=re.DOTALL | re.MULTILINE), flags=re.MULTILINE)
            assert fragment in {anchor(heading) for heading in headings}, \
                f"{page.name} links to {target}: {linked.name} has no such heading"


@pytest.mark.fast
@pytest.mark.parametrize("readme,most", [("README.md", 23 * 1024)]
                         + [(str(page.relative_to(REPO)), 40 * 1024) for page in BENCHMARK_PAGES])
def test_each_readme_stays_within_its_size(readme, most):
    # The README is read from top to bottom by a new user (23 KiB: 20 until it gained a section for another language,
    # issue #85); benchmarks/README.md is the index of the benchmarks' pages, each a reference, not a lab notebook.
    assert len((REPO / readme).read_bytes()) <= most
