"""The classifier's SavedModel: raw strings in, probabilities and labels out."""

import json
import os

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.export.parts import PARTS_FILE
from keras_transformer.export.signature_defs import set_method_name
from keras_transformer.export.versions import write_new_version
from keras_transformer.export.warmup import write_warmup_requests
from keras_transformer.text.padding import trim_shared_padding

# The signature of TensorFlow Serving's classification contract (its method name, input and
# outputs are TensorFlow's constants, tf.saved_model.CLASSIFY_*).
CLASSIFY_SIGNATURE = "classify"
# The bytes feature of each tf.train.Example it reads that holds the text.
TEXT_FEATURE = "text"


def export_classifier(
    model, tokenizer, class_names, base_dir, add_cls=None, add_sep=False, mix=None
):
    """Writes `base_dir/VERSION/` (the next integer) and returns that folder.

    Signatures (all take `text`, string `[None]`):

    * `serving_default` -> `probabilities` (float32 `[None, num_classes]`),
      `label` (string `[None]`, the most probable class name).
    * `attention` -> `tokens` (string `[None, T]`, `""` at padding) and
      `attention_scores` (float32 `[None, layers, heads, T, T]`), for plots;
      `T` is the batch's longest text in tokens (at least 1).
    * `embed`, for a `PretrainedClassifier` only -> `embedding` (float32
      `[None, d_model]`): the encoder's sentence embeddings
      (`PretrainedEncoder.embed`: mean over real tokens, L2-normalized) of the
      tokens it reads, tokenized as for `serving_default`.

    And `classify`, TensorFlow Serving's classification contract (its method
    name `tensorflow/serving/classify`, so its Classify and MultiInference
    APIs take it): `inputs` (string `[None]`, serialized `tf.train.Example`s
    holding the text in a bytes feature `text`) -> `classes` (string
    `[None, num_classes]`, the class names) and `scores` (float32
    `[None, num_classes]`, `serving_default`'s probabilities).

    Where `mix` gives the Transformer weight 0, its head is zeros and the
    answer is the bag of n-grams' alone: the export then holds the bag and
    the tokenizer only, `serving_default` computes the bag alone (the same
    outputs) and there is no `attention` signature, since no attention
    changes the answer (`classifier.json` says `"encoder": false`), nor `embed`;
    `classify` computes the bag alone too.

    The class names are also written, one per line, to
    `assets.extra/class_names.txt`, and what each part contributes to
    `assets.extra/classifier.json` (`keras_transformer.export.parts`).

    The tokenizer's vocabulary travels as an asset, so the export loads with
    only `tensorflow` and `tensorflow_text` imported.

    Args:
        model: a built `TransformerClassifier` or `PretrainedClassifier`.
        tokenizer: the `WordPieceTokenizer` (or `PretrainedTokenizer`) the
            model was trained with.
        class_names: list of names, index = class id.
        base_dir: the model's base path, e.g. `exported_models/classifier`.
        add_cls: whether inputs start with `[CLS]`; defaults to the model's
            pooling being `"cls"`.
        add_sep: whether inputs end with `[SEP]` (a BERT-family checkpoint's
            `[CLS] text [SEP]`).
        mix: `(transformer_weight, bag_weight)` that training chose for a
            model with a bag of n-grams (already in its weights; recorded).

    Raises:
        ValueError: the class names do not fit the model, or `mix` gives the
            Transformer weight 0 but the model's head is not zeros (its
            answers are not the bag's alone).
    """
    add_cls, parts = checked_export_parts(model, class_names, add_cls, mix)
    signatures = _ClassifierSignatures(model, tokenizer, class_names, add_cls, add_sep)
    return write_new_version(
        base_dir, lambda folder: _write(folder, signatures, class_names, parts)
    )


def checked_export_parts(model, class_names, add_cls, mix):
    """`(add_cls, parts)` of a classifier's export, in any format: whether inputs start
    with `[CLS]` (None: the model's pooling says), and `classifier.json`'s contents.

    Raises:
        ValueError: the class names do not fit the model, or `mix` gives the
            Transformer weight 0 but the model's head is not zeros.
    """
    if len(class_names) != model.num_classes:
        raise ValueError(
            f"{len(class_names)} class names for a model with {model.num_classes} classes."
        )
    if add_cls is None:
        add_cls = model.pooling == "cls"
    parts = _parts(model, mix)
    if not parts["encoder"]:
        _check_head_is_zeros(model)
    return add_cls, parts


def _parts(model, mix):
    """`classifier.json`'s contents: each part's weight in the answer and how far it reads."""
    transformer_weight, bag_weight = (1.0, None) if model.ngrams is None else mix or (1.0, 1.0)
    return {
        "transformer_weight": transformer_weight,
        "transformer_tokens": model.sequence_length,
        "bag_weight": bag_weight,
        "bag_tokens": None if model.ngrams is None else model.input_length,
        # Whether the export holds the encoder (and its `attention` signature): not where
        # the Transformer's weight is 0, as nothing it computes reaches the answer.
        "encoder": transformer_weight != 0.0,
    }


def _check_head_is_zeros(model):
    """ValueError unless the head of `model` (the Transformer's logits) is all zeros: only
    then is the bag of n-grams alone the model's answer."""
    for weight in (model.head.kernel, model.head.bias):
        if np.any(keras.ops.convert_to_numpy(weight) != 0.0):
            raise ValueError(
                "`mix` gives the Transformer weight 0, but the model's head "
                f"({weight.path}) is not zeros: exporting the bag of n-grams alone would "
                "change its answers. Training scales the head by the chosen weight; "
                "export the model it left, or pass the `mix` it recorded."
            )


def _write(folder, signatures, class_names, parts):
    """The SavedModel of `signatures` in `folder`, the class names beside it."""
    text_spec = [tf.TensorSpec([None], tf.string, name="text")]
    examples_spec = [tf.TensorSpec([None], tf.string, name=tf.saved_model.CLASSIFY_INPUTS)]
    archive = keras.export.ExportArchive()
    archive.track(signatures.tokenizer)
    if parts["encoder"]:
        archive.track(signatures.model)
        archive.add_endpoint("serving_default", signatures.serve, input_signature=text_spec)
        archive.add_endpoint(CLASSIFY_SIGNATURE, signatures.classify, input_signature=examples_spec)
        archive.add_endpoint("attention", signatures.attention, input_signature=text_spec)
        if signatures.can_embed:
            archive.add_endpoint("embed", signatures.embed, input_signature=text_spec)
    else:
        # Only the bag's weights are tracked, so the encoder's are not saved.
        archive.track(signatures.model.ngrams)
        archive.add_endpoint(
            "serving_default", signatures.serve_bag_alone, input_signature=text_spec
        )
        archive.add_endpoint(
            CLASSIFY_SIGNATURE, signatures.classify_bag_alone, input_signature=examples_spec
        )
    archive.write_out(folder, verbose=False)
    # tf.saved_model.save names every signature's method predict; TensorFlow Serving's
    # Classify takes a classification signature.
    set_method_name(folder, CLASSIFY_SIGNATURE, tf.saved_model.CLASSIFY_METHOD_NAME)
    # Column names for clients; assets.extra is the SavedModel convention
    # for files that serving ignores.
    extra = os.path.join(folder, "assets.extra")
    os.makedirs(extra, exist_ok=True)
    with open(os.path.join(extra, "class_names.txt"), "w", encoding="utf-8") as names_file:
        names_file.writelines(f"{name}\n" for name in class_names)
    with open(os.path.join(extra, PARTS_FILE), "w", encoding="utf-8") as parts_file:
        json.dump(parts, parts_file, indent=2)
    write_warmup_requests(folder, signatures.tokenizer, signatures.model.input_length, TEXT_FEATURE)


class _ClassifierSignatures:
    """The export's signature functions (traced by `ExportArchive.add_endpoint`), over one
    model and its tokenizer; each takes a batch of strings."""

    def __init__(self, model, tokenizer, class_names, add_cls, add_sep):
        self.model = model
        self.tokenizer = tokenizer
        self.add_cls = add_cls
        self.add_sep = add_sep
        self.names = tf.constant([str(name) for name in class_names])

    def serve(self, text):
        # Padding every row shares is dropped: a batch of short texts costs
        # their length, not `input_length`; the probabilities are the same.
        token_ids = trim_shared_padding(self._encode(text, self.model.input_length))
        probabilities = tf.cast(self.model(token_ids, training=False), tf.float32)
        return self._answer(probabilities)

    def serve_bag_alone(self, text):
        # The model's answer where its head is zeros: the softmax of the bag's logits
        # (the head adds exactly 0 to them).
        token_ids = trim_shared_padding(self._encode(text, self.model.input_length))
        logits = tf.cast(self.model.ngrams(token_ids), tf.float32)
        return self._answer(tf.nn.softmax(logits, axis=-1))

    def _answer(self, probabilities):
        label = tf.gather(self.names, tf.argmax(probabilities, axis=-1))
        return {"probabilities": probabilities, "label": label}

    def classify(self, inputs):
        return self._classification(self.serve(_example_texts(inputs)))

    def classify_bag_alone(self, inputs):
        return self._classification(self.serve_bag_alone(_example_texts(inputs)))

    def _classification(self, answer):
        """`serving_default`'s answer as TensorFlow Serving's classification outputs."""
        probabilities = answer["probabilities"]
        classes = tf.tile(self.names[tf.newaxis], [tf.shape(probabilities)[0], 1])
        return {
            tf.saved_model.CLASSIFY_OUTPUT_CLASSES: classes,
            tf.saved_model.CLASSIFY_OUTPUT_SCORES: probabilities,
        }

    def attention(self, text):
        # Trimmed as in `serve`: the weights grow with T squared, and at
        # `sequence_length` a short text's would be megabytes of padding.
        # The Transformer's tokens: the bag of n-grams may read further, but attends to nothing.
        token_ids = trim_shared_padding(self._encode(text, self.model.sequence_length))
        _, scores = self.model(token_ids, training=False, return_attention_scores=True)
        tokens = tf.where(token_ids > 0, self.tokenizer.id_to_token(token_ids), "")
        return {
            "tokens": tokens,
            "attention_scores": tf.cast(tf.stack(scores, axis=1), tf.float32),
        }

    @property
    def can_embed(self):
        """Whether the model has sentence embeddings (a `PretrainedClassifier`'s encoder)."""
        return callable(getattr(self.model, "embed", None))

    def embed(self, text):
        # The encoder's tokens only: the bag of n-grams' further tokens are not embedded.
        token_ids = trim_shared_padding(self._encode(text, self.model.sequence_length))
        return {"embedding": tf.cast(self.model.embed(token_ids, training=False), tf.float32)}

    def _encode(self, text, length):
        return self.tokenizer.encode(text, length, add_cls=self.add_cls, add_sep=self.add_sep)


def _example_texts(serialized_examples):
    """The `text` feature of each serialized tf.train.Example: one string, required (an Example
    without it, or with another type, fails the call with the parser's message)."""
    features = {TEXT_FEATURE: tf.io.FixedLenFeature([], tf.string)}
    return tf.io.parse_example(serialized_examples, features)[TEXT_FEATURE]
