"""The translator keeps its best-translating epoch: chrF against
hand-computed values, `ValidationChrF` on a scripted decoder, and tiny runs
that log `val_chrf`, select, resume and stop on it."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.cli import train_translator as train_translator_app
from keras_transformer.data import load_translation_data
from keras_transformer.data.tokens import TranslationTokens
from keras_transformer.data.translation import PairSplit, TranslationData
from keras_transformer.models import Seq2SeqTransformer
from keras_transformer.text import WordPieceTokenizer, build_vocabulary, save_vocabulary
from keras_transformer.training import callbacks as training_callbacks
from keras_transformer.training.runs import RunFolder
from keras_transformer.training.translator.chrf import ValidationChrF, chrf_subset, corpus_chrf
from keras_transformer.training.translator.pipeline import train_translator
from keras_transformer.training.translator.settings import TranslatorSettings
from keras_transformer.training.translator.tokenizing import run_vocabularies
from tests.apps.test_train_translator import FLAGS, write_pairs
from tests.classifier_fixtures import expect_usage_error
from tests.training.test_retracing import count_train_step_traces, long_texts

# --- chrF, by hand ------------------------------------------------------------------


def test_identical_texts_score_100_and_disjoint_ones_0():
    assert corpus_chrf(["The blue dog.", "a cat"], ["The blue dog.", "a cat"]) == pytest.approx(
        100.0
    )
    assert corpus_chrf(["abc"], ["xyz"]) == 0.0
    assert corpus_chrf([""], ["a reference"]) == 0.0


def test_whitespace_is_ignored_and_case_is_not():
    assert corpus_chrf(["a b  c"], ["abc"]) == pytest.approx(100.0)
    assert corpus_chrf(["ABC"], ["abc"]) == 0.0


def test_a_worked_example_weighs_recall_twice_as_much_as_precision():
    # "abc" against "abcd": 1-grams 3 of 3 hypothesis / 4 reference match,
    # 2-grams 2 of 2 / 3, 3-grams 1 of 1 / 2. The hypothesis has no 4-gram
    # and the reference no 5-gram: those orders do not count. Precision
    # averages 1, recall (3/4 + 2/3 + 1/2) / 3 = 23/36, and
    # F2 = 5 P R / (4 P + R) = (115/36) / (167/36) = 115/167.
    assert corpus_chrf(["abc"], ["abcd"]) == pytest.approx(100 * 115 / 167)
    # The other way round precision is 23/36 and recall 1 (the 4-gram
    # "abcd" has no reference 4-gram to match, so it is not counted):
    # (115/36) / (92/36 + 1) = 115/128. Missing text costs more than extra text.
    assert corpus_chrf(["abcd"], ["abc"]) == pytest.approx(100 * 115 / 128)


def test_matches_are_clipped_by_the_reference_counts():
    # "aaa" against "a": 1 of the 3 hypothesis "a"s matches (precision 1/3,
    # recall 1); no reference 2-gram, so that order does not count.
    # F2 = 5 (1/3) / (4/3 + 1) = 5/7.
    assert corpus_chrf(["aaa"], ["a"]) == pytest.approx(100 * 5 / 7)


def test_the_corpus_score_sums_counts_rather_than_averaging_sentences():
    # ("ab", "ab") gives 1-grams 2/2/2 and 2-grams 1/1/1 (hypothesis /
    # reference / matches); ("cdef", "cdxy") gives 4/4/2, 3/3/1, 2/2/0, 1/1/0.
    # Summed: 6/6/4, 4/4/2, 2/2/0, 1/1/0; precision = recall =
    # (4/6 + 2/4 + 0 + 0) / 4 = 7/24. Averaging the sentences' scores would
    # give (100 + 100 * 5/24) / 2 instead.
    assert corpus_chrf(["ab", "cdef"], ["ab", "cdxy"]) == pytest.approx(100 * 7 / 24)


def test_an_order_the_reference_lacks_drops_that_sentences_hypothesis_ngrams():
    # As sacrebleu: "abcd" against "abc" adds no 4-gram counts at all, so the
    # corpus' 4-grams are those of ("wxyz", "wxyz") alone. Summed: 8/7/7,
    # 6/5/5, 4/3/3, 1/1/1; recall 1, precision (7/8 + 5/6 + 3/4 + 1) / 4 =
    # 83/96; F2 = (415/96) / (332/96 + 1) = 415/428.
    assert corpus_chrf(["abcd", "wxyz"], ["abc", "wxyz"]) == pytest.approx(100 * 415 / 428)


def test_a_reference_per_hypothesis_is_required():
    with pytest.raises(
        ValueError, match="one reference per hypothesis: got 2 hypotheses and 1 references"
    ):
        corpus_chrf(["a", "b"], ["a"])


def test_agrees_with_sacrebleu():
    sacrebleu = pytest.importorskip(
        "sacrebleu", reason="sacrebleu (requirements-bench.txt) is not installed"
    )
    hypotheses = ["The blue dog sleeps.", "A cat", "", "And God said, Let there be light.", "x"]
    references = [
        "The dog is blue.",
        "The cat sat.",
        "Nothing here",
        "And God said: let there be light!",
        "xy",
    ]
    expected = sacrebleu.corpus_chrf(hypotheses, [references]).score
    assert corpus_chrf(hypotheses, references) == pytest.approx(expected, abs=1e-9)


def test_the_validation_subset_is_seeded_and_capped_by_the_split():
    subset = chrf_subset(1000, 200, seed=5)
    assert len(set(subset)) == 200 and list(subset) == sorted(subset)
    np.testing.assert_array_equal(subset, chrf_subset(1000, 200, seed=5))
    assert not np.array_equal(subset, chrf_subset(1000, 200, seed=6))
    np.testing.assert_array_equal(chrf_subset(8, 200, seed=5), np.arange(8))


# --- ValidationChrF on a scripted decoder ----------------------------------------------


class CopyingDecoder:
    """Has the decoding methods of `Seq2SeqTransformer`: "translates" by emitting
    its source ids one per step, then `[END]`, shifted by `garble` ids (0 copies)."""

    def __init__(self, vocabulary_size, end_id, sequence_length=16):
        self.vocabulary_size = vocabulary_size
        self.end_id = end_id
        self.sequence_length = sequence_length
        self.garble = tf.Variable(0, dtype=tf.int32)

    def encode(self, source_ids, training=None):
        return tf.cast(source_ids, tf.float32), source_ids > 0

    def initialize_cache(self, encoder_output, source_mask, max_length):
        source_ids = tf.cast(encoder_output, tf.int32)
        padded = tf.pad(source_ids, [[0, 0], [0, max_length]])
        return (tf.zeros([tf.shape(source_ids)[0]]),), {"source_ids": padded}

    def decode_step(self, token_ids, index, self_cache, step_constants):
        source_id = step_constants["source_ids"][:, index]
        garbled = tf.where(
            source_id > 6, (source_id - 7 + self.garble) % (self.vocabulary_size - 7) + 7, 0
        )
        next_id = tf.where(source_id > 0, garbled, self.end_id)
        return tf.one_hot(next_id, self.vocabulary_size) * 10.0, self_cache


@pytest.fixture(scope="module")
def shared_tokenizer(tmp_path_factory):
    words = "the blue dog red cat green hat sleeps runs".split()
    path = tmp_path_factory.mktemp("vocabulary") / "vocabulary.txt"
    save_vocabulary(build_vocabulary([" ".join(words)] * 20, 60, lower_case=False), path)
    return WordPieceTokenizer(path, lower_case=False)


def chrf_callback(tokenizer, sources, references, **options):
    """`ValidationChrF` on the pairs encoded as the translator encodes them (16 source tokens)."""
    source_ids = tokenizer.encode(tf.constant(sources), 16).numpy()
    reference_ids = tokenizer.encode(tf.constant(references), 17, add_start_end=True).numpy()
    return ValidationChrF(
        source_ids, reference_ids, references, tokenizer.vocabulary, max_output_length=16, **options
    )


def test_validation_chrf_scores_the_detokenized_greedy_output(shared_tokenizer):
    sources = ["the blue dog sleeps", "red cat", "the green hat runs", "dog", "the cat runs"]
    decoder = CopyingDecoder(shared_tokenizer.vocabulary_size, shared_tokenizer.token_id("[END]"))
    callback = chrf_callback(shared_tokenizer, sources, sources, batch_size=2)
    callback.set_model(decoder)
    callback.on_train_begin()
    logs = {"val_loss": 1.0}
    callback.on_epoch_end(0, logs)
    assert callback.translations() == sources  # in their order, across sorted batches of 2
    assert logs["val_chrf"] == pytest.approx(100.0)
    decoder.garble.assign(1)  # read by the traced decode: no retrace needed
    garbled = callback.translations()
    assert garbled != sources
    callback.on_epoch_end(1, logs)
    assert logs["val_chrf"] == pytest.approx(corpus_chrf(garbled, sources))
    assert logs["val_chrf"] < 60


def test_validation_chrf_cuts_outputs_at_twice_the_longest_reference(shared_tokenizer):
    source = " ".join(["dog"] * 12)
    decoder = CopyingDecoder(shared_tokenizer.vocabulary_size, shared_tokenizer.token_id("[END]"))
    callback = chrf_callback(shared_tokenizer, [source], ["dog dog"])
    callback.set_model(decoder)
    callback.on_train_begin()
    # The reference has 2 tokens: at most 2 * 2 + 1 generated, the last not [END].
    assert callback.translations() == [" ".join(["dog"] * 5)]


# --- tiny training runs ------------------------------------------------------------------

SETTINGS = dict(
    batch_size=16,
    sequence_length=12,
    vocabulary_size=120,
    num_layers=1,
    d_model=32,
    num_heads=2,
    intermediate_dim=64,
    warmup_steps=10,
)


@pytest.fixture(scope="module")
def numbers_data(tmp_path_factory):
    path = write_pairs(tmp_path_factory.mktemp("pairs") / "pairs.tsv")
    return load_translation_data(f"tsv:{path}", validation_size=8, test_size=8)


class Crash(Exception):
    pass


class CrashAfterEpoch(keras.callbacks.Callback):
    """Raises once `epoch` is logged and backed up (it runs after the run folder's callbacks)."""

    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.epoch:
            raise Crash


def fixed_shape_data(train_size, held_out_size):
    """Pairs of 16-word texts, longer than `SETTINGS`' sequence length, so every
    row is truncated to it: with `train_size` a multiple of the batch size, every
    training batch has one shape."""

    def split(count, seed):
        return PairSplit(long_texts(count, seed, words=16), long_texts(count, seed + 100, words=16))

    return TranslationData(
        "synthetic",
        split(train_size, 0),
        split(held_out_size, 1),
        split(held_out_size, 2),
        "source",
        "target",
        0,
        0,
    )


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory):
    """Four epochs of a cosine-scheduled translator: interrupted after the second,
    resumed with a time budget that the third epoch's chrF decode spends.

    The decode moves a clock of the callbacks module only (the time budget's and
    the schedule's) an hour on. Returns `(run, history before the resume, planned
    training steps, train-step traces of the interrupted part, of the resumed part)`.
    """
    data = fixed_shape_data(4 * SETTINGS["batch_size"], SETTINGS["batch_size"])
    run_dir = tmp_path_factory.mktemp("resumed") / "run"
    settings = TranslatorSettings(epochs=4, schedule="cosine", **SETTINGS)
    with pytest.MonkeyPatch.context() as patch:
        traces_before = count_train_step_traces(patch, Seq2SeqTransformer)
        with pytest.raises(Crash):
            train_translator(data, settings, run_dir, verbose=0, callbacks=[CrashAfterEpoch(1)])
    history_before = RunFolder(run_dir).read_history()
    clock = {"now": 0.0}
    decode = ValidationChrF.on_epoch_end

    def slow_decode(self, epoch, logs=None):
        decode(self, epoch, logs)
        clock["now"] += 3600.0

    with pytest.MonkeyPatch.context() as patch:
        traces_after = count_train_step_traces(patch, Seq2SeqTransformer)
        patch.setattr(
            training_callbacks, "time", type("Clock", (), {"monotonic": lambda: clock["now"]})
        )
        patch.setattr(ValidationChrF, "on_epoch_end", slow_decode)
        # Settings given on resume are ignored for the saved ones (val_chrf on 200 pairs).
        run = train_translator(
            data,
            TranslatorSettings(epochs=4, monitor="val_loss", chrf_pairs=0, **SETTINGS),
            run_dir,
            resume=True,
            time_budget_minutes=30,
            verbose=0,
        )
    planned = settings.epochs * -(-len(data.train) // settings.batch_size)
    return run, history_before, planned, traces_before, traces_after


def test_every_epoch_logs_val_chrf_across_the_resume(resumed_run):
    run, history_before, *_ = resumed_run
    assert len(history_before["val_chrf"]) == 2
    history = RunFolder(run.run_dir).read_history()
    assert len(history["loss"]) == 3 and len(history["val_chrf"]) == 3
    assert history["val_chrf"][:2] == history_before["val_chrf"]
    assert all(0.0 <= value <= 100.0 for value in history["val_chrf"])


def test_the_kept_epoch_is_the_best_val_chrf_of_the_whole_run(resumed_run):
    run, *_ = resumed_run
    folder = RunFolder(run.run_dir)
    history, kept = folder.read_history(), folder.read_best_epoch()
    best = max(history["val_chrf"])
    ties = [index for index, value in enumerate(history["val_chrf"]) if value == best]
    best_index = min(ties, key=lambda index: history["val_loss"][index])
    assert kept["monitor"] == "val_chrf" and kept["epoch"] == best_index + 1
    assert kept["value"] == pytest.approx(best)


# That `val_chrf` is the chrF of the exported greedy translations is checked
# on an app run that exports: tests/training/test_shared_vocabulary.py.


def test_a_time_budget_spent_by_the_decode_ends_training_with_that_epoch(resumed_run):
    # The resumed part trained the third epoch of four, and no more.
    run, history_before, *_ = resumed_run
    history = RunFolder(run.run_dir).read_history()
    assert run.stopped_by_time_budget
    assert len(history["loss"]) - len(history_before["loss"]) == 1
    assert len(history["val_chrf"]) - len(history_before["val_chrf"]) == 1


def test_the_translator_traces_its_train_step_once_in_each_part_of_the_run(resumed_run):
    """As tests/training/test_retracing.py checks for the classifier: the
    translator's `fit`, callbacks and all, traces its train step once for
    batches of one shape (two epochs before the interruption, one after)."""
    *_, traces_before, traces_after = resumed_run
    assert len(traces_before) == 1, f"traced {len(traces_before)} times: {traces_before}"
    assert len(traces_after) == 1, f"traced {len(traces_after)} times: {traces_after}"


# --- flags -----------------------------------------------------------------------------


def test_monitor_flag_defaults_to_val_chrf_and_checks_its_pairs(tmp_path, capsys):
    parser = train_translator_app.build_parser()
    assert parser.parse_args([]).monitor == "val_chrf" == TranslatorSettings().monitor
    assert parser.parse_args(["--monitor", "val_masked_accuracy"]).monitor == "val_masked_accuracy"
    with pytest.raises(SystemExit):
        parser.parse_args(["--monitor", "val_accuracy"])
    assert "--monitor: invalid choice: 'val_accuracy'" in capsys.readouterr().err
    message = expect_usage_error(
        train_translator_app.main,
        ["--data", "bible:es-en", *FLAGS, "--chrf-pairs", "0", "--run-dir", str(tmp_path / "run")],
        capsys,
    )
    assert "val_chrf" in message and "chrf_pairs" in message
    message = expect_usage_error(
        train_translator_app.main,
        ["--data", "bible:es-en", *FLAGS, "--chrf-pairs", "-1", "--run-dir", str(tmp_path / "run")],
        capsys,
    )
    assert "chrf_pairs" in message and "-1" in message
    assert not os.path.exists(tmp_path / "run")


def test_chrf_pairs_zero_with_another_monitor_logs_no_val_chrf(numbers_data, tmp_path):
    run = train_translator(
        numbers_data,
        TranslatorSettings(epochs=1, monitor="val_masked_accuracy", chrf_pairs=0, **SETTINGS),
        tmp_path / "run",
        verbose=0,
    )
    folder = RunFolder(run.run_dir)
    assert "val_chrf" not in folder.read_history()
    assert folder.read_best_epoch()["monitor"] == "val_masked_accuracy"
    with open(folder.file("settings.json")) as settings_file:
        assert json.load(settings_file)["settings"]["chrf_pairs"] == 0


# --- the average of the last epochs, kept when it validates better ---------------


class EpochWeights(keras.callbacks.Callback):
    """Records the trainable weights at every epoch's end, as NumPy copies."""

    def __init__(self):
        super().__init__()
        self.by_epoch = []

    def on_epoch_end(self, epoch, logs=None):
        self.by_epoch.append([np.array(v) for v in self.model.trainable_weights])


@pytest.fixture(scope="module")
def averaged_run(numbers_data, tmp_path_factory):
    recorded = EpochWeights()
    run = train_translator(
        numbers_data,
        TranslatorSettings(epochs=3, average_epochs=2, **SETTINGS),
        tmp_path_factory.mktemp("averaged") / "run",
        verbose=0,
        callbacks=[recorded],
    )
    return run, recorded.by_epoch


def test_the_run_compares_the_average_of_its_last_epochs_on_validation(averaged_run):
    run, by_epoch = averaged_run
    ending = run.metrics["ending"]
    with open(RunFolder(run.run_dir).file("metrics.json")) as metrics_file:
        assert json.load(metrics_file)["ending"] == ending
    assert ending["averaged_epochs"] == [2, 3]
    scores = ending["validation_chrf"]
    assert ending["kept"] == (
        "average" if scores["average"] > scores["kept_epoch"] else "kept_epoch"
    )
    kept_epoch = RunFolder(run.run_dir).read_best_epoch()["epoch"]
    expected = (
        [(late + last) / 2 for late, last in zip(by_epoch[1], by_epoch[2])]
        if ending["kept"] == "average"
        else by_epoch[kept_epoch - 1]
    )
    for variable, value in zip(run.model.trainable_weights, expected, strict=True):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(variable), value, rtol=1e-6)


@pytest.mark.parametrize(
    "scores, kept",
    [((10.0, 20.0), "average"), ((20.0, 10.0), "kept_epoch"), ((15.0, 15.0), "kept_epoch")],
)
def test_the_average_is_kept_only_when_its_validation_chrf_is_higher(
    averaged_run, numbers_data, monkeypatch, scores, kept
):
    from keras_transformer.training.translator import pipeline

    run, by_epoch = averaged_run
    model = Seq2SeqTransformer.from_config(run.model.get_config())
    model.build_from_config(run.model.get_build_config())
    before = [np.array(by_epoch[0][index]) for index in range(len(by_epoch[0]))]
    for variable, value in zip(model.trainable_weights, before, strict=True):
        variable.assign(value)
    recent = training_callbacks.RecentEpochWeights(2)
    recent.set_model(model)
    for weights in by_epoch[1:]:
        for variable, value in zip(model.trainable_weights, weights, strict=True):
            variable.assign(value)
        recent.on_epoch_end(len(recent.epoch_numbers))
    for variable, value in zip(model.trainable_weights, before, strict=True):
        variable.assign(value)
    answers = iter(scores)
    monkeypatch.setattr(pipeline, "corpus_chrf", lambda *_: next(answers))
    validation = numbers_data.validation
    source_ids = run.source_tokenizer.encode(
        tf.constant(validation.sources), run.settings.sequence_length
    ).numpy()
    _, target_vocabulary = run_vocabularies(RunFolder(run.run_dir), run.settings)
    ending = pipeline._keep_average_if_better(
        model,
        recent,
        TranslationTokens(source_ids, source_ids, validation.sources, validation.targets),
        run.settings,
        target_vocabulary,
        verbose=0,
    )
    assert ending["kept"] == kept
    assert ending["validation_chrf"] == {"kept_epoch": scores[0], "average": scores[1]}
    expected = (
        [(late + last) / 2 for late, last in zip(by_epoch[1], by_epoch[2])]
        if kept == "average"
        else before
    )
    for variable, value in zip(model.trainable_weights, expected, strict=True):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(variable), value, rtol=1e-6)


def test_average_epochs_is_checked_and_chosen_by_the_schedule():
    from keras_transformer.training.translator.data_rules import translator_settings_from_counts

    with pytest.raises(ValueError, match="average_epochs"):
        TranslatorSettings(average_epochs=-1).validate()
    chosen = {
        schedule: translator_settings_from_counts(
            TranslatorSettings(schedule=schedule), 20_000, 500_000
        )[0].average_epochs
        for schedule in ("inverse_sqrt", "cosine")
    }
    assert chosen == {"inverse_sqrt": 5, "cosine": 0}
    given = translator_settings_from_counts(TranslatorSettings(average_epochs=3), 20_000, 500_000)
    assert given[0].average_epochs == 3


# --- the cosine schedule (a time budget ends with the learning rate at 0) ---


def test_the_cosine_schedule_warms_up_to_the_inverse_sqrt_peak_and_ends_at_0():
    from keras_transformer.training.schedules import TransformerSchedule
    from keras_transformer.training.translator.model import learning_rate_schedule_of

    settings = TranslatorSettings(
        d_model=256, warmup_steps=100, learning_rate_scale=0.75, schedule="cosine"
    )
    cosine = learning_rate_schedule_of(settings, total_steps=1000)
    inverse_sqrt = TransformerSchedule(256, 100, 0.75)
    peak = max(float(inverse_sqrt(step)) for step in range(300))
    assert float(cosine(100)) == pytest.approx(peak, rel=1e-6)
    for step in (10, 50, 99):  # the same linear warmup, a step apart
        assert float(cosine(step)) == pytest.approx(float(inverse_sqrt(step - 1)), rel=1e-6)
    assert float(cosine(550)) == pytest.approx(peak / 2, rel=1e-4)  # half way down the cosine
    assert float(cosine(1000)) == pytest.approx(0.0, abs=1e-12)
    assert float(cosine(900)) < float(inverse_sqrt(900)) / 5
    with pytest.raises(ValueError, match="total_steps"):
        learning_rate_schedule_of(settings)
    inverse_sqrt_settings = TranslatorSettings(
        d_model=256, warmup_steps=100, schedule="inverse_sqrt"
    )
    assert isinstance(learning_rate_schedule_of(inverse_sqrt_settings), TransformerSchedule)
    with pytest.raises(ValueError, match="leaves schedule to be chosen"):
        learning_rate_schedule_of(TranslatorSettings(d_model=256, warmup_steps=100))


def test_a_cosine_run_cut_short_by_its_budget_shortens_its_schedule(resumed_run):
    from keras_transformer.training.compiling import learning_rate_schedule
    from keras_transformer.training.schedules import WarmupCosine

    run, _, planned, *_ = resumed_run
    schedule = learning_rate_schedule(run.model)
    assert run.stopped_by_time_budget and isinstance(schedule, WarmupCosine)
    assert float(schedule.total_steps.numpy()) < planned
    assert (
        json.load(open(os.path.join(run.run_dir, "settings.json")))["settings"]["schedule"]
        == "cosine"
    )


def test_the_schedule_flag_is_checked():
    with pytest.raises(ValueError, match="`schedule` must be one of inverse_sqrt, cosine"):
        TranslatorSettings(schedule="linear").validate()


@pytest.mark.parametrize("patience", [-1, 1.5])
def test_the_patience_is_checked(patience):
    with pytest.raises(ValueError, match="`patience` must be a non-negative integer"):
        TranslatorSettings(patience=patience).validate()
