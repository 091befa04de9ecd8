"""BagOfNgrams against scikit-learn's TfidfVectorizer on the same token n-grams."""

import keras
import numpy as np
import pytest
from keras import ops
from scipy import sparse
from sklearn.feature_extraction.text import TfidfVectorizer

from keras_transformer.layers import BagOfNgrams

VOCABULARY = 40
BUCKETS = 100003  # far more than the bigrams below: no two share a row


def random_ids(rows=30, length=12, seed=0):
    """0-padded ids with repeats (a small vocabulary), an empty row and a full one."""
    rng = np.random.default_rng(seed)
    token_ids = np.zeros((rows, length), "int32")
    for row in range(1, rows):
        count = length if row == 1 else int(rng.integers(1, length + 1))
        token_ids[row, :count] = rng.integers(1, VOCABULARY, count)
    return token_ids


def sklearn_logits(train_ids, token_ids, layer, ngram_range, **options):
    """TF-IDF of the ids as words (`t5 t7 ...`), fit on `train_ids`, times the layer's
    kernel as used."""

    def documents(ids):
        return [" ".join(f"t{token}" for token in row if token > 0) for row in ids]

    vectorizer = TfidfVectorizer(
        ngram_range=ngram_range, token_pattern=r"\S+", lowercase=False, **options
    )
    vectorizer.fit(documents(train_ids))
    features = vectorizer.transform(documents(token_ids)).toarray()
    kernel = np.asarray(ops.convert_to_numpy(layer.kernel)) * layer.learning_rate_multiplier
    weights = np.zeros((features.shape[1], layer.units))
    for ngram, column in vectorizer.vocabulary_.items():
        tokens = [int(word[1:]) for word in ngram.split()]
        row = (
            tokens[0]
            if len(tokens) == 1
            else (tokens[0] * VOCABULARY + tokens[1]) % BUCKETS + VOCABULARY
        )
        weights[column] = kernel[row]
    return features @ weights


@pytest.mark.parametrize("num_buckets, ngram_range", [(BUCKETS, (1, 2)), (0, (1, 1))])
@pytest.mark.parametrize("sublinear_tf", [True, False])
@pytest.mark.parametrize("min_df", [1, 2, 3])
def test_equals_tfidf_times_the_kernel(num_buckets, ngram_range, sublinear_tf, min_df):
    train_ids, token_ids = random_ids(seed=0), random_ids(rows=12, seed=1)
    layer = BagOfNgrams(
        VOCABULARY,
        3,
        num_buckets=num_buckets,
        sublinear_tf=sublinear_tf,
        min_document_frequency=min_df,
        kernel_initializer=keras.initializers.RandomNormal(seed=3),
    )
    layer.adapt(train_ids)
    outputs = np.asarray(ops.convert_to_numpy(layer(token_ids)))
    expected = sklearn_logits(
        train_ids, token_ids, layer, ngram_range, sublinear_tf=sublinear_tf, min_df=min_df
    )
    np.testing.assert_allclose(outputs, expected, atol=1e-5)
    assert np.all(outputs[0] == 0.0)  # an all-padding row: no features, no NaN


def test_the_sparse_features_times_the_kernel_are_the_layer_s_output():
    token_ids = random_ids(rows=20, seed=1)
    layer = BagOfNgrams(VOCABULARY, 3, num_buckets=1009, use_bias=True, min_document_frequency=1)
    layer.adapt(token_ids)
    rng = np.random.default_rng(2)
    kernel, bias = rng.normal(size=(layer.num_features, 3)), rng.normal(size=3)
    layer.set_linear_weights(kernel, bias)
    np.testing.assert_allclose(layer.effective_kernel, kernel, rtol=1e-5, atol=1e-6)
    rows, columns, values = layer.sparse_features(token_ids)
    features = sparse.csr_matrix(
        (values, (rows, columns)), shape=(len(token_ids), layer.num_features)
    )
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(layer(token_ids)), features @ kernel + bias, atol=1e-4
    )
    restored = BagOfNgrams.from_config(layer.get_config())
    assert restored.use_bias


def test_before_adapt_every_idf_is_one():
    layer = BagOfNgrams(
        VOCABULARY,
        2,
        num_buckets=0,
        kernel_initializer="ones",
        learning_rate_multiplier=1.0,
        sublinear_tf=False,
    )
    # Token 5 twice and 6 once: L2-normalized counts (2, 1) / sqrt(5), summed by the
    # all-ones kernel.
    outputs = np.asarray(ops.convert_to_numpy(layer(np.array([[5, 6, 5, 0]], "int32"))))
    np.testing.assert_allclose(outputs, [[3 / np.sqrt(5)] * 2], rtol=1e-6)


def test_padding_and_out_of_vocabulary_ids_are_no_features():
    layer = BagOfNgrams(VOCABULARY, 2, kernel_initializer=keras.initializers.RandomNormal(seed=4))
    layer.adapt(random_ids())
    short = np.array([[7, 9, 11, 0, 0, 0]], "int32")
    noisy = np.array([[7, 9, 11, 0, VOCABULARY + 3, 0]], "int32")
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer(noisy)), ops.convert_to_numpy(layer(short)), atol=1e-6
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer(short)), ops.convert_to_numpy(layer(short[:, :3])), atol=1e-6
    )


def test_learning_rate_multiplier_scales_the_kernel_and_the_penalty():
    layer = BagOfNgrams(
        VOCABULARY,
        2,
        num_buckets=0,
        learning_rate_multiplier=10.0,
        l2=0.5,
        kernel_initializer="ones",
    )
    layer.build((None, 4))
    outputs = np.asarray(ops.convert_to_numpy(layer(np.array([[5, 0, 0, 0]], "int32"))))
    # one feature of weight 1, kernel 1 * 10
    np.testing.assert_allclose(outputs, [[10.0, 10.0]], rtol=1e-6)
    (penalty,) = layer.losses
    np.testing.assert_allclose(
        float(ops.convert_to_numpy(penalty)), 0.5 * 100.0 * VOCABULARY * 2, rtol=1e-6
    )


def rare_feature_margin(learning_rate_multiplier):
    """Class 1 iff token 9 occurs, in 4 of 200 texts, one batch an epoch: after 5 epochs
    of Adam at 1e-3, how far the least likely positive's probability of class 1 exceeds
    the likeliest negative's."""
    rng = np.random.default_rng(5)
    token_ids = rng.integers(10, VOCABULARY, (200, 6)).astype("int32")
    labels = np.zeros(200, "int32")
    token_ids[:4, 2], labels[:4] = 9, 1
    inputs = keras.Input((6,), dtype="int32")
    ngrams = BagOfNgrams(
        VOCABULARY, 2, num_buckets=0, learning_rate_multiplier=learning_rate_multiplier
    )
    model = keras.Model(inputs, keras.layers.Softmax()(ngrams(inputs)))
    ngrams.adapt(token_ids)
    model.compile(keras.optimizers.Adam(1e-3), "sparse_categorical_crossentropy")
    model.fit(token_ids, labels, batch_size=20, epochs=5, verbose=0, shuffle=False)
    probabilities = np.asarray(model.predict(token_ids, verbose=0))[:, 1]
    return probabilities[:4].min() - probabilities[4:].max()


def test_the_multiplier_lets_a_rare_feature_learn_fast():
    assert rare_feature_margin(30.0) > 0.02
    assert rare_feature_margin(1.0) < 0.005  # the same training without it: hardly apart


def test_saved_with_its_document_frequencies(tmp_path):
    inputs = keras.Input((12,), dtype="int32")
    layer = BagOfNgrams(
        VOCABULARY,
        3,
        num_buckets=1009,
        l2=1e-4,
        kernel_initializer=keras.initializers.RandomNormal(seed=6),
    )
    model = keras.Model(inputs, layer(inputs))
    layer.adapt(random_ids())
    path = str(tmp_path / "ngrams.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    token_ids = random_ids(rows=5, seed=2)
    np.testing.assert_allclose(
        ops.convert_to_numpy(loaded(token_ids)), ops.convert_to_numpy(model(token_ids)), atol=1e-6
    )
    assert loaded.layers[-1].get_config() == layer.get_config()


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"vocabulary_size": 1}, "vocabulary_size"),
        ({"units": 0}, "units"),
        ({"num_buckets": -1}, "num_buckets"),
        ({"learning_rate_multiplier": 0}, "learning_rate_multiplier"),
        ({"l2": -1.0}, "l2"),
        ({"min_document_frequency": 0}, "min_document_frequency"),
    ],
)
def test_bad_arguments_are_named(arguments, message):
    with pytest.raises(ValueError, match=message):
        BagOfNgrams(**{"vocabulary_size": VOCABULARY, "units": 2, **arguments})


def test_adapt_refuses_what_is_not_token_ids():
    with pytest.raises(ValueError, match=r"integer token ids of shape \[N, T\]"):
        BagOfNgrams(VOCABULARY, 2).adapt(np.ones((3, 4), "float32"))


# Words spelled by WordPieces: ids 0-6 reserved, then word starts, continuations and punctuation.
WORD_VOCABULARY = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[START]",
    "[END]",
    "[MASK]",
    "ab",
    "cd",
    "ef",
    "gh",
    "ij",
    "##x",
    "##yz",
    "##w",
    "##ab",
    ".",
    ",",
    "!",
]
WORD_BUCKETS = 100003
# Each word is one segmentation; "ab" alone and "ab ##x" are different words, as are
# "ab ##x" and "ab ##ab".
WORDS = [(7,), (8,), (7, 12), (7, 15), (8, 12, 13), (9, 14), (10,), (11, 13, 12, 14), (9, 15, 12)]
PUNCTUATION = [16, 17, 18]


def word_texts(rows, seed, length=14):
    """0-padded ids of random words and punctuation, with an empty row and one cut in
    the middle of a word."""
    rng = np.random.default_rng(seed)
    token_ids = np.zeros((rows, length), "int32")
    for row in range(1, rows):
        pieces, wanted = [], int(rng.integers(1, length + 1))
        while len(pieces) < wanted:
            pieces.extend(
                [PUNCTUATION[rng.integers(3)]]
                if rng.random() < 0.2
                else WORDS[rng.integers(len(WORDS))]
            )
        pieces = pieces[:length]
        token_ids[row, : len(pieces)] = pieces
    token_ids[-1, :length] = (list(WORDS[7]) * length)[
        :length
    ]  # a long word's pieces, cut at the end
    return token_ids


def spelled_words(row):
    """The words of a row of ids as text, and their piece ids, as `set_vocabulary` reads them."""
    words = []
    for token in row:
        piece = WORD_VOCABULARY[token]
        if token == 0 or token in PUNCTUATION:
            continue
        if piece.startswith("##") and words:
            words[-1][0] += piece[2:]
            words[-1][1].append(int(token))
        else:
            words.append([piece, [int(token)]])
    return words


def reference_word_rows(row, layer):
    """Word unigram and bigram rows of one row of ids, hashed in plain Python as
    documented in the layer."""
    from keras_transformer.layers.ngrams import (
        WORD_BIGRAM_MULTIPLIER,
        WORD_HASH_MODULUS,
        WORD_PIECE_MULTIPLIERS,
    )

    hashes = []
    for _, pieces in spelled_words(row):
        last = pieces[::-1][: len(WORD_PIECE_MULTIPLIERS)]
        hashes.append(
            sum(
                piece * multiplier % WORD_HASH_MODULUS
                for piece, multiplier in zip(last, WORD_PIECE_MULTIPLIERS)
            )
            % WORD_HASH_MODULUS
        )
    offset = layer.vocabulary_size + layer.num_buckets
    unigrams = [value % layer.num_word_buckets + offset for value in hashes]
    bigrams = [
        (first * WORD_BIGRAM_MULTIPLIER + second) % layer.num_word_buckets + offset
        for first, second in zip(hashes, hashes[1:])
    ]
    return unigrams, bigrams


def word_layer(**arguments):
    layer = BagOfNgrams(
        len(WORD_VOCABULARY),
        3,
        num_buckets=BUCKETS,
        num_word_buckets=WORD_BUCKETS,
        kernel_initializer=keras.initializers.RandomNormal(seed=7),
        **arguments,
    )
    layer.set_vocabulary(WORD_VOCABULARY)
    return layer


def test_words_are_hashed_from_their_pieces_in_order():
    layer = word_layer()
    token_ids = word_texts(25, seed=3)
    _, _, unigrams, bigrams = [
        np.asarray(ops.convert_to_numpy(rows)) for rows in layer.ngram_ids(token_ids)
    ]
    for row in range(len(token_ids)):
        expected_unigrams, expected_bigrams = reference_word_rows(token_ids[row], layer)
        assert unigrams[row][unigrams[row] >= 0].tolist() == expected_unigrams
        assert bigrams[row][bigrams[row] >= 0].tolist() == expected_bigrams
    # Different segmentations are different words, and punctuation is none.
    single = np.array([[7, 16, 7, 12, 17, 7, 15, 8, 12, 13, 0]], "int32")
    word_rows = np.asarray(ops.convert_to_numpy(layer.ngram_ids(single)[2]))[0]
    assert len(set(word_rows[word_rows >= 0].tolist())) == 4 and np.sum(word_rows >= 0) == 4


@pytest.mark.parametrize("features", [("pieces", "words"), ("words",), ("pieces",)])
def test_word_features_equal_tfidf_of_the_spelled_words(features):
    """scikit-learn on documents of the pieces (`t7 t12 ...`) and the words they spell
    (`w_abx ...`), one L2 norm over both, times the kernel rows the layer gives each of
    them."""
    train_ids, token_ids = word_texts(40, seed=0), word_texts(15, seed=1)
    layer = word_layer(min_document_frequency=2)
    layer.adapt(train_ids, features=features)

    def ngrams(tokens):
        return [*tokens, *(f"{first} {second}" for first, second in zip(tokens, tokens[1:]))]

    def documents(ids):
        """Each row's n-grams: the pieces' (`t7`, `t7 t12`) and the words' (`w_abx`,
        `w_abx w_cd`), apart."""
        return [
            (ngrams([f"t{token}" for token in row if token > 0]) if "pieces" in features else [])
            + (
                ngrams([f"w_{word}" for word, _ in spelled_words(row)])
                if "words" in features
                else []
            )
            for row in ids
        ]

    vectorizer = TfidfVectorizer(analyzer=lambda document: document, sublinear_tf=True, min_df=2)
    vectorizer.fit(documents(train_ids))
    features_matrix = vectorizer.transform(documents(token_ids)).toarray()
    pieces_of = {word: pieces for row in train_ids for word, pieces in spelled_words(row)}
    kernel = layer.effective_kernel
    weights = np.zeros((features_matrix.shape[1], layer.units))
    rows_used = []
    for ngram, column in vectorizer.vocabulary_.items():
        tokens = ngram.split()
        if tokens[0].startswith("t"):
            ids = [int(token[1:]) for token in tokens]
            row = (
                ids[0]
                if len(ids) == 1
                else (ids[0] * len(WORD_VOCABULARY) + ids[1]) % BUCKETS + len(WORD_VOCABULARY)
            )
        else:
            spelled = np.array([sum((pieces_of[token[2:]] for token in tokens), [])], "int32")
            unigrams, bigrams = reference_word_rows(spelled[0], layer)
            row = unigrams[0] if len(tokens) == 1 else bigrams[0]
        rows_used.append(row)
        weights[column] = kernel[row]
    assert len(set(rows_used)) == len(rows_used)  # no two features share a row here
    expected = features_matrix @ weights
    np.testing.assert_allclose(ops.convert_to_numpy(layer(token_ids)), expected, atol=1e-5)
    rows, columns, values = layer.sparse_features(token_ids)
    sparse_features = sparse.csr_matrix(
        (values, (rows, columns)), shape=(len(token_ids), layer.num_features)
    )
    np.testing.assert_allclose(sparse_features @ kernel, expected, atol=1e-5)
    idf = np.asarray(ops.convert_to_numpy(layer.idf))
    for family in ("pieces", "words"):
        assert (idf[layer.family_rows(family)].max() > 0) == (family in features)


def test_word_features_are_saved_with_the_layer(tmp_path):
    inputs = keras.Input((None,), dtype="int32")
    layer = word_layer()
    model = keras.Model(inputs, layer(inputs))
    layer.adapt(word_texts(40, seed=0))
    path = str(tmp_path / "words.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    token_ids = word_texts(6, seed=4)
    np.testing.assert_allclose(
        ops.convert_to_numpy(loaded(token_ids)), ops.convert_to_numpy(model(token_ids)), atol=1e-6
    )
    assert loaded.layers[-1].get_config()["num_word_buckets"] == WORD_BUCKETS


def test_word_features_refuse_what_they_cannot_use():
    with pytest.raises(ValueError, match="no word features"):
        BagOfNgrams(VOCABULARY, 2).set_vocabulary([f"t{index}" for index in range(VOCABULARY)])
    with pytest.raises(ValueError, match="the families this layer has"):
        BagOfNgrams(VOCABULARY, 2).adapt(random_ids(), features="words")
    with pytest.raises(ValueError, match="19 tokens, the layer 40 ids"):
        BagOfNgrams(VOCABULARY, 2, num_word_buckets=101).set_vocabulary(WORD_VOCABULARY)
    with pytest.raises(ValueError, match="num_word_buckets"):
        BagOfNgrams(VOCABULARY, 2, num_word_buckets=-1)
