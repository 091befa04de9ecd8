"""A bag of n-grams: a linear model on the TF-IDF of token (and word) unigrams and bigrams."""

import keras
import numpy as np
from keras import ops

from keras_transformer.layers.initializers import clone_initializer

FEATURE_FAMILIES = ("pieces", "words")
# What `set_vocabulary` marks each id as.
NO_WORD, WORD_START, WORD_CONTINUATION = 0, 1, 2
# A word is hashed from its last `WORD_PIECES_HASHED` pieces, each id times
# its position's multiplier, modulo a prime below 2**20: every product and
# sum stays within int32 on every backend (ids below 2**16).
WORD_PIECES_HASHED = 8
WORD_HASH_MODULUS = 1048573
WORD_PIECE_MULTIPLIERS = (1, 7919, 15401, 21011, 26699, 29453, 31327, 32749)
WORD_BIGRAM_MULTIPLIER = 1031  # below 2**11, so that a word hash times it stays within int32


@keras.saving.register_keras_serializable(package="keras_transformer")
class BagOfNgrams(keras.layers.Layer):
    """Token ids in, a linear function of their unigrams' and bigrams' TF-IDF out.

    The features are those of scikit-learn's `TfidfVectorizer`: each
    distinct n-gram of a text weighs its count `c` (or, with `sublinear_tf`,
    `1 + ln(c)`) times its inverse document frequency
    `idf = ln((1 + n) / (1 + df)) + 1`, and the weights of a text are scaled
    to unit L2 norm. An n-gram in fewer than `min_document_frequency` of the
    training texts is no feature. The output is those features times a
    trainable matrix: with `units` the number of classes, the logits of a
    logistic regression on them. Unigrams are the token ids themselves;
    bigrams are hashed into `num_buckets` rows of their own.

    With `num_word_buckets`, the words the pieces spell are features too: a
    piece that `set_vocabulary` marks as a continuation (`##ing`) joins the
    word before it, and each word and each pair of adjacent words is hashed
    into `num_word_buckets` rows after the pieces' (pieces that are no word,
    punctuation and reserved tokens, are left out, as scikit-learn's token
    pattern leaves them out). Both families share one L2 norm.
    `adapt(..., features=...)` keeps one family or both.

    The document frequencies come from the training ids, by `adapt` (before
    training; they are weights, saved with the model). Until then every idf is
    1 (plain counts, L2-normalized).

    A sparse linear model learns slowly with the step size of a Transformer:
    each n-gram's row moves only in the few steps that see it. The kernel is
    therefore stored divided by `learning_rate_multiplier`, which multiplies
    the pace of an optimizer that normalizes its steps (Adam) by that much;
    `l2` applies to the kernel as used.

    `sparse_features` gives the same features as a sparse matrix's triplets,
    for solvers outside Keras (`keras_transformer.training.classifier.bag_of_ngrams`, which
    fits the kernel and bias as a logistic regression in one go).

    Args:
        vocabulary_size: int. The number of token ids; 0 is padding.
        units: int. The output width (the number of classes for logits).
        num_buckets: int, defaults to `262139` (a prime near 2**18). Rows for
            hashed bigrams; 0 for unigrams only.
        num_word_buckets: int, defaults to `0` (no word features). Rows for
            hashed word unigrams and bigrams; needs `set_vocabulary`.
        learning_rate_multiplier: float, defaults to `30.0`. See above.
        l2: float, defaults to `0.0`. The L2 penalty on the kernel as used,
            added to the loss.
        use_bias: bool, defaults to `False`. Add a bias (a logistic
            regression's intercept; not penalized).
        sublinear_tf: bool, defaults to `True`. Count `1 + ln(c)` for an
            n-gram seen `c` times: a word repeated in a long text weighs
            less than `c` words.
        min_document_frequency: int, defaults to `2`. See above; an n-gram
            of one training text can only help to memorize that text.
        kernel_initializer: defaults to `"zeros"` (the model starts from
            the rest of the network's logits).
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        token_ids: int `[B, T]`, 0-padded.

    Example:

    >>> import numpy as np
    >>> from keras_transformer.layers import BagOfNgrams
    >>> layer = BagOfNgrams(vocabulary_size=100, units=3, num_buckets=1009)
    >>> token_ids = np.array([[5, 6, 5, 0], [7, 8, 0, 0]], "int32")
    >>> layer.adapt(token_ids)
    >>> tuple(layer(token_ids).shape)
    (2, 3)

    Words spelled by WordPieces, beside the pieces:

    >>> vocabulary = ["[PAD]", "[UNK]", "play", "##ing", "##ed", "cards", "."]
    >>> layer = BagOfNgrams(vocabulary_size=7, units=2, num_buckets=101, num_word_buckets=101,
    ...                     min_document_frequency=1)
    >>> layer.set_vocabulary(vocabulary)
    >>> # "playing cards ." and "played cards"
    >>> token_ids = np.array([[2, 3, 5, 6], [2, 4, 5, 0]], "int32")
    >>> layer.adapt(token_ids)
    >>> tuple(layer(token_ids).shape)
    (2, 2)

    References:
        Salton and Buckley, "Term-weighting approaches in automatic text
        retrieval", 1988 (TF-IDF).
        Joulin et al., "Bag of Tricks for Efficient Text Classification",
        2016 (hashed bigrams beside unigrams).
    """

    def __init__(
        self,
        vocabulary_size,
        units,
        num_buckets=262139,
        num_word_buckets=0,
        learning_rate_multiplier=30.0,
        l2=0.0,
        use_bias=False,
        sublinear_tf=True,
        min_document_frequency=2,
        kernel_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        for name, value, low in (
            ("vocabulary_size", vocabulary_size, 2),
            ("units", units, 1),
            ("num_buckets", num_buckets, 0),
            ("num_word_buckets", num_word_buckets, 0),
            ("min_document_frequency", min_document_frequency, 1),
        ):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
                raise ValueError(f"`{name}` must be an integer of at least {low}, got {value!r}.")
        if not learning_rate_multiplier > 0:
            raise ValueError(
                f"`learning_rate_multiplier` must be positive, got {learning_rate_multiplier!r}."
            )
        if not l2 >= 0:
            raise ValueError(f"`l2` must be at least 0, got {l2!r}.")
        self.vocabulary_size = int(vocabulary_size)
        self.units = int(units)
        self.num_buckets = int(num_buckets)
        self.num_word_buckets = int(num_word_buckets)
        if self.num_word_buckets and self.vocabulary_size > 2**16:
            raise ValueError(
                f"Word features take a vocabulary of at most {2**16} ids, "
                f"got {self.vocabulary_size}."
            )
        self.learning_rate_multiplier = float(learning_rate_multiplier)
        self.l2 = float(l2)
        self.use_bias = bool(use_bias)
        self.sublinear_tf = bool(sublinear_tf)
        self.min_document_frequency = int(min_document_frequency)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    @property
    def num_features(self):
        return self.vocabulary_size + self.num_buckets + self.num_word_buckets

    def family_rows(self, family):
        """The `range` of feature rows of `family` (one of `FEATURE_FAMILIES`)."""
        pieces = self.vocabulary_size + self.num_buckets
        if family == "pieces":
            return range(0, pieces)
        if family == "words":
            return range(pieces, self.num_features)
        raise ValueError(f"A feature family is one of {FEATURE_FAMILIES}, got {family!r}.")

    def build(self, token_ids_shape=None):
        self.kernel = self.add_weight(
            name="kernel",
            shape=(self.num_features, self.units),
            initializer=clone_initializer(self.kernel_initializer, "kernel"),
            regularizer=self._penalty if self.l2 else None,
        )
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(name="bias", shape=(self.units,), initializer="zeros")
        self.idf = self.add_weight(
            name="idf", shape=(self.num_features,), initializer="ones", trainable=False
        )
        self.piece_kinds = None
        if self.num_word_buckets:
            self.piece_kinds = self.add_weight(
                name="piece_kinds",
                shape=(self.vocabulary_size,),
                dtype="int32",
                initializer="zeros",
                trainable=False,
            )
        self.built = True

    def set_vocabulary(self, vocabulary, continuation_prefix="##"):
        """Marks each id as a word's first piece, a continuation of the word
        before it (`continuation_prefix`), or no word: reserved tokens
        (`[PAD]`, `[UNK]`, ...) and pieces without a letter or digit.

        Args:
            vocabulary: the tokens, by id (`vocabulary_size` of them).
            continuation_prefix: str, defaults to `"##"` (WordPiece's).
        """
        vocabulary = list(vocabulary)
        if not self.num_word_buckets:
            raise ValueError("This BagOfNgrams has no word features (`num_word_buckets=0`).")
        if len(vocabulary) != self.vocabulary_size:
            raise ValueError(
                f"The vocabulary has {len(vocabulary)} tokens, "
                f"the layer {self.vocabulary_size} ids."
            )
        if not self.built:
            self.build()

        def kind(token):
            if token.startswith(continuation_prefix) and len(token) > len(continuation_prefix):
                return WORD_CONTINUATION
            if token.startswith("[") and token.endswith("]") or not any(map(str.isalnum, token)):
                return NO_WORD
            return WORD_START

        self.piece_kinds.assign(np.array([kind(token) for token in vocabulary], "int32"))

    def _penalty(self, kernel):
        return self.l2 * ops.sum(ops.square(kernel * self.learning_rate_multiplier))

    def ngram_ids(self, token_ids):
        """Each n-gram's feature row, -1 where there is none (padding, ids
        outside the vocabulary): a list of int `[B, L]` arrays, the piece
        unigrams `[B, T]`, then (with `num_buckets`) the piece bigrams
        `[B, T-1]`, then (with `num_word_buckets`) the word unigrams `[B, T]`
        and bigrams `[B, T-1]`, in the order of the words."""
        return self._ngram_ids(token_ids, self.piece_kinds)

    def _ngram_ids(self, token_ids, piece_kinds):
        token_ids = ops.cast(token_ids, "int32")
        real = (token_ids > 0) & (token_ids < self.vocabulary_size)
        rows = [ops.where(real, token_ids, -1)]
        if self.num_buckets:
            first, second = token_ids[:, :-1], token_ids[:, 1:]
            # first * V + second < V**2 stays within int32 for any vocabulary under 46,000.
            hashed = (
                first * self.vocabulary_size + second
            ) % self.num_buckets + self.vocabulary_size
            rows.append(ops.where(real[:, :-1] & real[:, 1:], hashed, -1))
        if self.num_word_buckets:
            rows.extend(self._word_ngram_ids(ops.where(real, token_ids, 0), piece_kinds))
        return rows

    def _host_ngram_ids(self, token_ids):
        """`ngram_ids` of NumPy ids `[B, T]`, as NumPy arrays: what `adapt` and
        `sparse_features` count on the host.

        On JAX the function is compiled once per shape: run op by op, JAX
        compiles each of its ops for every new shape, which on a GPU costs
        minutes over a corpus.
        """
        if keras.backend.backend() == "jax":
            import jax

            if getattr(self, "_compiled_ngram_ids", None) is None:
                self._compiled_ngram_ids = jax.jit(self._ngram_ids)
            kinds = None if self.piece_kinds is None else self.piece_kinds.value
            rows = self._compiled_ngram_ids(np.asarray(token_ids), kinds)
        else:
            rows = self.ngram_ids(token_ids)
        return [np.asarray(ops.convert_to_numpy(row)) for row in rows]

    def _word_ngram_ids(self, token_ids, piece_kinds):
        """`(unigrams [B, T], bigrams [B, T-1])` of the words the pieces
        spell, packed to the left in their order, -1 after the last."""
        kinds = ops.take(piece_kinds, token_ids)
        kinds = ops.where(token_ids > 0, kinds, NO_WORD)
        in_word, continues = kinds != NO_WORD, kinds == WORD_CONTINUATION
        length = ops.shape(token_ids)[1]
        # A word ends where the next piece does not continue it.
        ends = in_word & ops.logical_not(
            ops.concatenate([continues[:, 1:], ops.zeros_like(continues[:, :1])], axis=1)
        )

        def back(values, steps, fill):
            """`values` moved `steps` places to the right: position i holds i - steps."""
            if steps == 0:
                return values
            return ops.concatenate(
                [ops.full_like(values[:, :steps], fill), values[:, :-steps]], axis=1
            )

        word_hash = ops.zeros_like(token_ids)
        reaching = ends  # whether the piece `steps` back from a word's end is still that word's
        for steps, multiplier in enumerate(WORD_PIECE_MULTIPLIERS[:WORD_PIECES_HASHED]):
            term = (back(token_ids, steps, 0) * multiplier) % WORD_HASH_MODULUS
            word_hash = ops.where(reaching, (word_hash + term) % WORD_HASH_MODULUS, word_hash)
            reaching = reaching & back(continues, steps, False)
        # The words in order: the sorted end positions, `length` after the last.
        positions = ops.broadcast_to(ops.arange(length, dtype="int32"), ops.shape(token_ids))
        end_positions = ops.sort(ops.where(ends, positions, length), axis=-1)
        is_word = end_positions < length
        words = ops.take_along_axis(word_hash, ops.minimum(end_positions, length - 1), axis=1)
        offset = self.vocabulary_size + self.num_buckets
        unigrams = ops.where(is_word, words % self.num_word_buckets + offset, -1)
        pairs = (
            words[:, :-1] * WORD_BIGRAM_MULTIPLIER + words[:, 1:]
        ) % self.num_word_buckets + offset
        bigrams = ops.where(is_word[:, :-1] & is_word[:, 1:], pairs, -1)
        return unigrams, bigrams

    def adapt(self, token_ids, batch_size=1024, features=None):
        """Sets the inverse document frequencies from training ids `[N, T]`.

        Args:
            token_ids: int `[N, T]`, 0-padded.
            batch_size: ids counted at a time.
            features: the families of `FEATURE_FAMILIES` to use, defaults to
                every one the layer has; the others are no feature (idf 0).
        """
        token_ids = np.asarray(token_ids)
        if token_ids.ndim != 2 or not np.issubdtype(token_ids.dtype, np.integer):
            raise ValueError(
                "`adapt` takes integer token ids of shape [N, T], "
                f"got {token_ids.dtype} {token_ids.shape}."
            )
        features = self._families(features)
        if not self.built:
            self.build(token_ids.shape)
        document_frequency = np.zeros(self.num_features, np.int64)
        for start in range(0, len(token_ids), batch_size):
            for rows in self._host_ngram_ids(token_ids[start : start + batch_size]):
                for row in rows:
                    document_frequency[np.unique(row[row >= 0])] += 1
        count = len(token_ids)
        idf = np.log((1.0 + count) / (1.0 + document_frequency)) + 1.0
        # An n-gram the training ids never had is no feature (it has no trained weight to add).
        kept = document_frequency >= self.min_document_frequency
        used = np.zeros(self.num_features, bool)
        for family in features:
            used[self.family_rows(family)] = True
        self.idf.assign(np.where(kept & used, idf, 0.0).astype("float32"))

    def _families(self, features):
        has = ("pieces", "words") if self.num_word_buckets else ("pieces",)
        if features is None:
            return has
        features = (features,) if isinstance(features, str) else tuple(features)
        if not features or any(family not in has for family in features):
            raise ValueError(
                f"`features` takes some of {has} (the families this layer has), got {features!r}."
            )
        return features

    def call(self, token_ids):
        # The families' rows are disjoint ranges of features, so counting and weighting
        # their concatenation is the same as each family alone, with one sort rather than
        # four: a graph of the layer traces half the ops.
        rows, weight = self._tfidf_weights(ops.concatenate(self.ngram_ids(token_ids), axis=1))
        norm = ops.sqrt(ops.maximum(ops.sum(ops.square(weight), axis=-1), 1e-12))
        kernel = ops.cast(self.kernel, "float32") * self.learning_rate_multiplier
        rows_kernel = ops.take(kernel, ops.maximum(rows, 0), axis=0)
        outputs = ops.sum(rows_kernel * ops.expand_dims(weight, -1), axis=1)
        outputs = outputs / ops.expand_dims(norm, -1)
        if self.bias is not None:
            outputs = outputs + ops.cast(self.bias, "float32")
        return ops.cast(outputs, self.compute_dtype)

    def _tfidf_weights(self, rows):
        """`(rows, weights)` for feature rows `[B, L]` (-1: none): rows in some
        order and the TF-IDF weight `tf(c) * idf` of each distinct n-gram at
        one of its positions, 0 at its other copies and at padding (idf 0)."""
        rows, count = _sorted_with_counts(rows)
        idf = ops.where((count > 0) & (rows >= 0), ops.take(self.idf, ops.maximum(rows, 0)), 0.0)
        count = ops.cast(ops.maximum(count, 1), "float32")
        term_frequency = 1.0 + ops.log(count) if self.sublinear_tf else count
        return rows, term_frequency * idf

    def sparse_features(self, token_ids, batch_size=1024):
        """The TF-IDF features of `token_ids` `[N, T]` (NumPy), as the
        `(rows, columns, values)` of a sparse `[N, num_features]` matrix:
        the layer's output is that matrix times the kernel as used
        (`effective_kernel`), plus the bias."""
        idf = np.asarray(keras.ops.convert_to_numpy(self.idf), np.float64)
        rows, columns, values = [], [], []
        for start in range(0, len(token_ids), batch_size):
            parts = self._host_ngram_ids(np.asarray(token_ids[start : start + batch_size]))
            for offset in range(len(parts[0])):
                ngrams = np.concatenate([part[offset] for part in parts])
                features, counts = np.unique(ngrams[ngrams >= 0], return_counts=True)
                term_frequency = (
                    1.0 + np.log(counts) if self.sublinear_tf else counts.astype(np.float64)
                )
                weights = term_frequency * idf[features]
                kept = weights > 0
                features, weights = features[kept], weights[kept]
                norm = np.sqrt(np.sum(np.square(weights)))
                rows.append(np.full(len(features), start + offset, np.int64))
                columns.append(features.astype(np.int64))
                values.append(weights / norm if norm > 0 else weights)
        if not rows:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64)
        return np.concatenate(rows), np.concatenate(columns), np.concatenate(values)

    @property
    def effective_kernel(self):
        """The kernel as used: the stored one times `learning_rate_multiplier` (NumPy)."""
        return (
            np.asarray(keras.ops.convert_to_numpy(self.kernel), np.float64)
            * self.learning_rate_multiplier
        )

    def set_linear_weights(self, kernel, bias=None):
        """Sets the kernel as used (`[num_features, units]`) and, with `use_bias`, the bias."""
        self.kernel.assign(
            (np.asarray(kernel) / self.learning_rate_multiplier).astype(self.kernel.dtype)
        )
        if bias is not None:
            if self.bias is None:
                raise ValueError("This BagOfNgrams has no bias (`use_bias=False`).")
            self.bias.assign(np.asarray(bias).astype(self.bias.dtype))

    def compute_output_shape(self, token_ids_shape):
        return (token_ids_shape[0], self.units)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "units": self.units,
                "num_buckets": self.num_buckets,
                "num_word_buckets": self.num_word_buckets,
                "learning_rate_multiplier": self.learning_rate_multiplier,
                "l2": self.l2,
                "use_bias": self.use_bias,
                "sublinear_tf": self.sublinear_tf,
                "min_document_frequency": self.min_document_frequency,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config


def _sorted_with_counts(rows):
    """`(sorted_rows, counts)` for int rows `[B, L]`: each row sorted, and at
    the last position of each run of equal values the run's length (0 at
    the others). Sorting costs O(L log L) a row where comparing every pair
    of positions would cost O(L**2) memory and time."""
    sorted_rows = ops.sort(rows, axis=-1)
    length = ops.shape(rows)[1]
    is_last = ops.concatenate(
        [
            sorted_rows[:, 1:] != sorted_rows[:, :-1],
            ops.ones_like(sorted_rows[:, :1], dtype="bool"),
        ],
        axis=1,
    )
    positions = ops.broadcast_to(ops.arange(length, dtype="int32"), ops.shape(rows))
    # The positions where runs end, in order, then `length` for the rows' spare places.
    run_ends = ops.sort(ops.where(is_last, positions, length), axis=-1)
    run_lengths = run_ends - ops.concatenate(
        [ops.full_like(run_ends[:, :1], -1), run_ends[:, :-1]], axis=1
    )
    is_last = ops.cast(is_last, "int32")
    runs_before = ops.cumsum(is_last, axis=1) - is_last
    return sorted_rows, is_last * ops.take_along_axis(run_lengths, runs_before, axis=1)
