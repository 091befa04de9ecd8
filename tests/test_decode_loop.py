"""`greedy_decode_loop` (any backend) gives `greedy_decode`'s tokens, and `val_chrf`
from ids is the chrF the TensorFlow tokenizer path gave."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding import greedy_decode, greedy_decode_loop
from keras_transformer.models.seq2seq import Seq2SeqTransformer
from keras_transformer.text import WordPieceTokenizer, save_vocabulary
from keras_transformer.text.padding import trim_shared_padding
from keras_transformer.text.vocabulary import detokenize
from keras_transformer.training.translator.chrf import ValidationChrF, corpus_chrf
from tests.training.tiny_runs import VOCABULARY, run_translator, translator_arrays

START, END = 4, 5


@pytest.mark.parametrize("seed, scale", [(3, 0.3), (4, 0.5), (7, 0.5)])
def test_the_loop_gives_greedy_decodes_tokens(seed, scale, randomize):
    keras.utils.set_random_seed(seed)
    model = Seq2SeqTransformer(
        30,
        12,
        sequence_length=16,
        num_encoder_layers=2,
        num_decoder_layers=2,
        d_model=32,
        num_heads=4,
        intermediate_dim=64,
        dropout=0.0,
    )
    model.build()
    # Random weights, biases included: rows say different things and stop at different steps.
    randomize(model, seed=seed, scale=scale)
    rng = np.random.default_rng(seed)
    sources = np.zeros((9, 10), np.int32)
    for row, length in zip(sources, rng.integers(1, 11, size=9)):
        row[:length] = rng.integers(6, 30, size=length)
    # The token the first row says 4th stands for [END]: that row stops there
    # or sooner (and the zeros after it are compared), the others wherever they say it.
    end_id = int(greedy_decode(model, sources, 12, START, -1).numpy()[0, 3])
    expected = greedy_decode(model, sources, 12, START, end_id).numpy()
    generated = greedy_decode_loop(model, sources, 12, START, end_id)
    assert generated.dtype == np.int32 and generated.shape == (9, 12)
    np.testing.assert_array_equal(generated, expected)
    stop = list(expected[0]).index(end_id)
    assert stop <= 3 and not expected[0, stop + 1 :].any()
    assert expected[:, stop + 1 :].any()  # not every row stopped with the first
    empty = greedy_decode_loop(model, sources[:0], 12, START, end_id)
    assert empty.shape == (0, 12)


@pytest.fixture(scope="module")
def trained_translator(tmp_path_factory, randomize):
    """A tiny translator trained (on TensorFlow, from `ArrayBatches`), then given random
    weights: a few steps teach it one sentence for every source, the weights many."""
    fitted, _, _ = run_translator(tmp_path_factory.mktemp("run") / "translator", epochs=2)
    randomize(fitted.model, seed=1, scale=0.5)
    path = tmp_path_factory.mktemp("vocabulary") / "vocabulary.txt"
    save_vocabulary(VOCABULARY, path)
    return fitted.model, WordPieceTokenizer(path, lower_case=False)


@pytest.mark.parametrize("backend", ["tensorflow", "another"])
def test_val_chrf_from_ids_is_the_tokenizer_paths(trained_translator, backend, monkeypatch):
    """The score `ValidationChrF` gave before it took ids (a traced greedy decode,
    detokenized by the tokenizer), on a tiny translator; on another
    backend the callback decodes with `greedy_decode_loop`, checked here on TensorFlow."""
    model, tokenizer = trained_translator
    source_ids, target_ids = translator_arrays(seed=7, count=40)
    references = detokenize(target_ids, VOCABULARY)
    reference_lengths = tokenizer.tokenize(tf.constant(references)).row_lengths()
    max_length = min(10, 2 * int(tf.reduce_max(reference_lengths)) + 1, model.sequence_length)
    generated = greedy_decode(
        model, trim_shared_padding(tf.constant(source_ids)), max_length, START, END
    )
    before = [text.decode("utf-8") for text in tokenizer.detokenize(generated).numpy()]
    assert len(set(before)) > 1  # the model tells sources apart

    if backend != "tensorflow":
        monkeypatch.setattr(keras.backend, "backend", lambda: backend)
    callback = ValidationChrF(
        source_ids, target_ids, references, VOCABULARY, max_output_length=10, batch_size=16
    )
    callback.set_model(model)
    callback.on_train_begin()
    logs = {}
    callback.on_epoch_end(0, logs)
    assert callback.translations() == before
    assert logs["val_chrf"] == corpus_chrf(before, references)
