"""The classifier's SavedModel: raw strings in, probabilities and labels out."""

import os

import keras
import tensorflow as tf

from keras_transformer.export.versions import write_new_version
from keras_transformer.text.padding import trim_shared_padding


def export_classifier(model, tokenizer, class_names, base_dir, add_cls=None):
    """Writes `base_dir/VERSION/` (the next integer) and returns that folder.

    Signatures (all take `text`, string `[None]`):

    * `serving_default` -> `probabilities` (float32 `[None, num_classes]`),
      `label` (string `[None]`, the most probable class name).
    * `attention` -> `tokens` (string `[None, T]`, `""` at padding) and
      `attention_scores` (float32 `[None, layers, heads, T, T]`), for plots;
      `T` is the batch's longest text in tokens (at least 1).

    The class names are also written, one per line, to
    `assets.extra/class_names.txt`.

    The tokenizer's vocabulary travels as an asset, so the export loads with
    only `tensorflow` and `tensorflow_text` imported.

    Args:
        model: a built `TransformerClassifier`.
        tokenizer: the `WordPieceTokenizer` the model was trained with.
        class_names: list of names, index = class id.
        base_dir: the model's base path, e.g. `exported_models/classifier`.
        add_cls: whether inputs start with `[CLS]`; defaults to the model's
            pooling being `"cls"`.
    """
    if len(class_names) != model.num_classes:
        raise ValueError(
            f"{len(class_names)} class names for a model with {model.num_classes} classes."
        )
    if add_cls is None:
        add_cls = model.pooling == "cls"
    names = tf.constant([str(name) for name in class_names])

    def encode(text, length):
        return tokenizer.encode(text, length, add_cls=add_cls)

    def serve(text):
        # Padding every row shares is dropped: a batch of short texts costs
        # their length, not `input_length`; the probabilities are the same.
        token_ids = trim_shared_padding(encode(text, model.input_length))
        probabilities = tf.cast(model(token_ids, training=False), tf.float32)
        label = tf.gather(names, tf.argmax(probabilities, axis=-1))
        return {"probabilities": probabilities, "label": label}

    def attention(text):
        # Trimmed as in `serve`: the weights grow with T squared, and at
        # `sequence_length` a short text's would be megabytes of padding.
        # The Transformer's tokens: the bag of n-grams may read further, but attends to nothing.
        token_ids = trim_shared_padding(encode(text, model.sequence_length))
        _, scores = model(token_ids, training=False, return_attention_scores=True)
        tokens = tf.where(token_ids > 0, tokenizer.id_to_token(token_ids), "")
        return {
            "tokens": tokens,
            "attention_scores": tf.cast(tf.stack(scores, axis=1), tf.float32),
        }

    text_spec = [tf.TensorSpec([None], tf.string, name="text")]

    def write(folder):
        archive = keras.export.ExportArchive()
        archive.track(model)
        archive.track(tokenizer)
        archive.add_endpoint("serving_default", serve, input_signature=text_spec)
        archive.add_endpoint("attention", attention, input_signature=text_spec)
        archive.write_out(folder, verbose=False)
        # Column names for clients; assets.extra is the SavedModel convention
        # for files that serving ignores.
        extra = os.path.join(folder, "assets.extra")
        os.makedirs(extra, exist_ok=True)
        with open(os.path.join(extra, "class_names.txt"), "w", encoding="utf-8") as names_file:
            names_file.writelines(f"{name}\n" for name in class_names)

    return write_new_version(base_dir, write)
