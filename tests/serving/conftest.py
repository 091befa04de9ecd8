"""Tiny random-weight exports for the server's tests, the direct answers of
those SavedModels, and a helper that runs `apps.serve` as a real process.

The exports are built once per session with the library's own functions
(vocabulary, tokenizer, models, `export_classifier`, `export_translator`) and
are small enough (width 16, one block, short sequences) to export in seconds.
Their weights are random, so the tests compare the server's answers with what
the same SavedModel answers when called directly, never with fixed texts.
"""

import os

import pytest

from tests.serving.serving_helpers import CLASS_NAMES
from tests.serving.serving_helpers import TEXT_POOL
from tests.serving.serving_helpers import VOCABULARY_TEXTS
from tests.serving.serving_helpers import Exports
from tests.serving.serving_helpers import ServerProcess
from tests.serving.serving_helpers import call_direct
from tests.serving.serving_helpers import load_direct
from tests.serving.serving_helpers import write_reweighted_copy


@pytest.fixture(scope="session")
def exports(tmp_path_factory, randomize):
    import keras

    from keras_transformer.export.classifier import export_classifier
    from keras_transformer.export.translator import export_translator
    from keras_transformer.export.versions import write_new_version
    from keras_transformer.models import Seq2SeqTransformer
    from keras_transformer.models import TransformerClassifier
    from keras_transformer.text import WordPieceTokenizer
    from keras_transformer.text import build_vocabulary
    from keras_transformer.text import save_vocabulary

    keras.utils.set_random_seed(7)
    root = str(tmp_path_factory.mktemp("serving_exports"))
    vocabulary = save_vocabulary(build_vocabulary(VOCABULARY_TEXTS, 80), os.path.join(root, "vocab.txt"))
    tokenizer = WordPieceTokenizer(vocabulary)

    classifier = TransformerClassifier(
        tokenizer.vocabulary_size, len(CLASS_NAMES), sequence_length=16, num_layers=1, d_model=16,
        num_heads=2, intermediate_dim=32,
    )
    classifier.build((None, 16))
    # Larger random weights than the initializers give, so different texts get
    # clearly different probabilities.
    randomize(classifier, seed=1, scale=0.5)
    export_classifier(classifier, tokenizer, CLASS_NAMES, os.path.join(root, "classifier"))

    translator = Seq2SeqTransformer(
        tokenizer.vocabulary_size, tokenizer.vocabulary_size, sequence_length=12, num_encoder_layers=1,
        num_decoder_layers=1, d_model=16, num_heads=2, intermediate_dim=32,
    )
    translator.build()
    randomize(translator, seed=2, scale=0.5)
    first = export_translator(translator, tokenizer, tokenizer, os.path.join(root, "translator"),
                              max_output_length=8, beam_width=2)
    # The same translator with other weights, to publish as a new version.
    spare = write_new_version(os.path.join(root, "spare_translator"),
                              lambda folder: write_reweighted_copy(first, folder, seed=3))
    return Exports(root, os.path.join(root, "classifier"), os.path.join(root, "translator"), spare)


@pytest.fixture(scope="session")
def direct_models(exports):
    """Loaded SavedModels by (model name, version): the reference the server is compared with."""
    return {
        ("classifier", 1): load_direct(exports.version_dir("classifier")),
        ("translator", 1): load_direct(exports.version_dir("translator")),
        ("translator", 2): load_direct(exports.spare_translator),
    }


@pytest.fixture(scope="session")
def direct_answers(direct_models):
    """Per text of TEXT_POOL, each model's direct answer, the text called alone (a batch of one):
    {(model, version): {text: answer}}; a classifier answer is (probabilities, label)."""
    answers = {}
    for key, loaded in direct_models.items():
        answers[key] = {}
        for text in TEXT_POOL:
            outputs = call_direct(loaded, [text])
            if key[0] == "classifier":
                answers[key][text] = (outputs["probabilities"][0], outputs["label"][0])
            else:
                answers[key][text] = outputs["translation"][0]
    return answers


@pytest.fixture
def start_server(tmp_path):
    """`start_server({name: base path}, *extra_args)` -> a running `ServerProcess`, stopped after the test."""
    started = []

    def start(models, *extra_args):
        server = ServerProcess(models, tmp_path / f"server{len(started)}.log", extra_args)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
