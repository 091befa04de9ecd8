"""The translator's SavedModel: raw strings in, translations out."""

import json
import os

import keras
import tensorflow as tf

from keras_transformer.decoding import beam_search, greedy_decode
from keras_transformer.export.versions import write_new_version
from keras_transformer.text.padding import trim_shared_padding
from keras_transformer.text.wordpiece import END, START

CONFIG_FILE = "translator.json"


def export_translator(
    model,
    source_tokenizer,
    target_tokenizer,
    base_dir,
    max_output_length=64,
    beam_width=4,
    length_penalty=0.6,
    source_language=None,
    target_language=None,
):
    """Writes `base_dir/VERSION/` (the next integer) and returns that folder.

    Signatures (all take `text`, string `[None]`):

    * `serving_default` -> `translation` (string `[None]`), by beam search.
    * `greedy` -> `translation` (string `[None]`), by greedy decoding.
    * `attention` -> `source_tokens` (string `[None, S]`), `target_tokens`
      (string `[None, T]`, the greedy translation's tokens, `[END]` included),
      `decoder_input_tokens` (string `[None, T]`: `[START]` then the target
      tokens but the last, what the decoder reads), all `""` at padding;
      `cross_attention` (float32 `[None, decoder_layers, heads, T, S]`): row
      `t` is where the decoder looked while producing target token `t` (the
      greedy output fed back teacher-forced); `decoder_self_attention`
      (`[None, decoder_layers, heads, T, T]`, over the decoder inputs) and
      `encoder_self_attention` (`[None, encoder_layers, heads, S, S]`); for
      plots.

    `S` is the model's `sequence_length`; `T` is `max_output_length`, capped
    at `sequence_length` (the longest target the model was trained on).
    Texts that give no tokens (empty, whitespace, invalid UTF-8 is replaced)
    translate to some string, possibly empty, never an error.

    The decoding settings (and languages, if given) are written to
    `assets.extra/translator.json`. Both vocabularies travel as assets, so the
    export loads with only `tensorflow` and `tensorflow_text` imported; two
    vocabulary files with the same file name (`a/vocabulary.txt`,
    `b/vocabulary.txt`) are kept apart by SavedModel itself.

    Args:
        model: a built `Seq2SeqTransformer`.
        source_tokenizer: the source `WordPieceTokenizer` it was trained with.
        target_tokenizer: the target `WordPieceTokenizer` (may be the same
            object for a shared vocabulary).
        base_dir: the model's base path, e.g. `exported_models/translator`.
        max_output_length: most target tokens generated, `[END]` included.
        beam_width: hypotheses kept by `serving_default`.
        length_penalty: GNMT length penalty of the beam search.
        source_language, target_language: optional names for clients.
    """
    if int(beam_width) < 1:
        raise ValueError(f"`beam_width` must be at least 1, got {beam_width!r}.")
    if int(max_output_length) < 1:
        raise ValueError(f"`max_output_length` must be at least 1, got {max_output_length!r}.")
    if source_tokenizer.vocabulary_size != model.source_vocabulary_size:
        raise ValueError(
            f"The source tokenizer has {source_tokenizer.vocabulary_size} tokens but the model "
            f"expects {model.source_vocabulary_size}."
        )
    if target_tokenizer.vocabulary_size != model.target_vocabulary_size:
        raise ValueError(
            f"The target tokenizer has {target_tokenizer.vocabulary_size} tokens but the model "
            f"expects {model.target_vocabulary_size}."
        )
    beam_width = int(beam_width)
    length_penalty = float(length_penalty)
    sequence_length = model.sequence_length
    max_length = min(int(max_output_length), sequence_length)
    start_id = target_tokenizer.token_id(START)
    end_id = target_tokenizer.token_id(END)

    def encode(text):
        return source_tokenizer.encode(text, sequence_length)

    def encode_trimmed(text):
        # The encoder and every step's cross-attention then cost the batch's
        # longest source, not `sequence_length`; the outputs are the same.
        return trim_shared_padding(encode(text))

    def translate_beam(text):
        token_ids, _ = beam_search(
            model,
            encode_trimmed(text),
            max_length,
            start_id,
            end_id,
            beam_width=beam_width,
            length_penalty=length_penalty,
        )
        return {"translation": target_tokenizer.detokenize(token_ids)}

    def greedy(source_ids):
        return greedy_decode(model, source_ids, max_length, start_id, end_id)

    def translate_greedy(text):
        return {"translation": target_tokenizer.detokenize(greedy(encode_trimmed(text)))}

    def attention(text):
        source_ids = encode(text)
        target_ids = tf.ensure_shape(greedy(source_ids), [None, max_length])
        encoder_output, source_mask, encoder_scores = model.encode(
            source_ids, training=False, return_attention_scores=True
        )
        # Teacher forcing on the model's own output: position t reads
        # [START] y_0 ... y_{t-1} and attends to the source to produce y_t.
        batch_size = tf.shape(target_ids)[0]
        target_in = tf.concat(
            [tf.fill([batch_size, 1], tf.constant(start_id, tf.int32)), target_ids[:, :-1]], axis=1
        )
        _, scores = model.decode(
            target_in, encoder_output, source_mask, training=False, return_attention_scores=True
        )

        def by_layer(weights):
            return tf.stack(
                [tf.cast(layer_weights, tf.float32) for layer_weights in weights], axis=1
            )

        return {
            "source_tokens": tf.where(source_ids > 0, source_tokenizer.id_to_token(source_ids), ""),
            "target_tokens": tf.where(target_ids > 0, target_tokenizer.id_to_token(target_ids), ""),
            "decoder_input_tokens": tf.where(
                target_in > 0, target_tokenizer.id_to_token(target_in), ""
            ),
            "cross_attention": by_layer([block["cross_attention"] for block in scores]),
            "decoder_self_attention": by_layer([block["self_attention"] for block in scores]),
            "encoder_self_attention": by_layer(encoder_scores),
        }

    text_spec = [tf.TensorSpec([None], tf.string, name="text")]
    config = {
        "beam_width": beam_width,
        "length_penalty": length_penalty,
        "max_output_length": max_length,
        "sequence_length": sequence_length,
        "source_language": source_language,
        "target_language": target_language,
        "signatures": {
            "serving_default": "beam search",
            "greedy": "greedy decoding",
            "attention": "attention weights of the greedy translation",
        },
    }

    def write(folder):
        archive = keras.export.ExportArchive()
        archive.track(model)
        archive.track(source_tokenizer)
        if target_tokenizer is not source_tokenizer:
            archive.track(target_tokenizer)
        archive.add_endpoint("serving_default", translate_beam, input_signature=text_spec)
        archive.add_endpoint("greedy", translate_greedy, input_signature=text_spec)
        archive.add_endpoint("attention", attention, input_signature=text_spec)
        archive.write_out(folder, verbose=False)
        extra = os.path.join(folder, "assets.extra")
        os.makedirs(extra, exist_ok=True)
        with open(os.path.join(extra, CONFIG_FILE), "w", encoding="utf-8") as config_file:
            json.dump(config, config_file, indent=2, ensure_ascii=False)
            config_file.write("\n")

    return write_new_version(base_dir, write)
