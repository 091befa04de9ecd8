"""The translator's SavedModel: raw strings in, translations out."""

import json
import os

import keras
import tensorflow as tf

from keras_transformer.decoding import beam_search, greedy_decode, sample_decode
from keras_transformer.export.controls import (
    CONFIG_FILE,
    CONTROLLED_SIGNATURE,
    request_controls,
)
from keras_transformer.export.versions import write_new_version
from keras_transformer.export.warmup import write_warmup_requests
from keras_transformer.text.padding import trim_shared_padding
from keras_transformer.text.wordpiece import END, START


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
    * `translate` takes, beside `text`, one value per request of each of
      `beam_width` (int32, 1 to the export's `beam_width`), `num_translations`
      (int32, 1 to the request's `beam_width`), `sampling` (bool),
      `temperature` (float32, above 0), `top_k` (int32, 0 for all tokens),
      `top_p` (float32, in `(0, 1]`) and `seed` (int64) -> `translations`
      (string `[None, num_translations]`, best first) and `scores` (float32
      `[None, num_translations]`): beam search's length-normalized scores, or
      with `sampling` the summed log-probabilities of `num_translations`
      drawings (`sample_decode`). With the export's beam width and one
      translation it answers as `serving_default`, with a beam width of 1 as
      `greedy`. Values out of range fail the call (`InvalidArgumentError`);
      the ranges and defaults are in `translator.json` under
      `"request_controls"`.
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
    _check_arguments(model, source_tokenizer, target_tokenizer, max_output_length, beam_width)
    signatures = _TranslatorSignatures(
        model,
        source_tokenizer,
        target_tokenizer,
        max_length=min(int(max_output_length), model.sequence_length),
        beam_width=int(beam_width),
        length_penalty=float(length_penalty),
    )
    config = {
        "beam_width": signatures.beam_width,
        "length_penalty": signatures.length_penalty,
        "max_output_length": signatures.max_length,
        "sequence_length": model.sequence_length,
        "source_language": source_language,
        "target_language": target_language,
        "signatures": {
            "serving_default": "beam search",
            "greedy": "greedy decoding",
            "attention": "attention weights of the greedy translation",
            CONTROLLED_SIGNATURE: "beam search or sampling, chosen per request",
        },
        "request_controls": request_controls(
            signatures.beam_width, target_tokenizer.vocabulary_size
        ),
    }
    return write_new_version(base_dir, lambda folder: _write(folder, signatures, config))


def _check_arguments(model, source_tokenizer, target_tokenizer, max_output_length, beam_width):
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


def _write(folder, signatures, config):
    """The SavedModel of `signatures` in `folder`, `config` beside it."""
    text_spec = [tf.TensorSpec([None], tf.string, name="text")]
    archive = keras.export.ExportArchive()
    archive.track(signatures.model)
    archive.track(signatures.source_tokenizer)
    if signatures.target_tokenizer is not signatures.source_tokenizer:
        archive.track(signatures.target_tokenizer)
    archive.add_endpoint("serving_default", signatures.translate_beam, input_signature=text_spec)
    archive.add_endpoint("greedy", signatures.translate_greedy, input_signature=text_spec)
    archive.add_endpoint("attention", signatures.attention, input_signature=text_spec)
    controls = config["request_controls"]["inputs"]
    archive.add_endpoint(
        CONTROLLED_SIGNATURE,
        signatures.translate_controlled,
        input_signature=text_spec
        + [
            tf.TensorSpec([], tf.as_dtype(spec["dtype"]), name=name)
            for name, spec in controls.items()
        ],
    )
    archive.write_out(folder, verbose=False)
    extra = os.path.join(folder, "assets.extra")
    os.makedirs(extra, exist_ok=True)
    with open(os.path.join(extra, CONFIG_FILE), "w", encoding="utf-8") as config_file:
        json.dump(config, config_file, indent=2, ensure_ascii=False)
        config_file.write("\n")
    write_warmup_requests(folder, signatures.source_tokenizer, signatures.model.sequence_length)


class _TranslatorSignatures:
    """The export's signature functions (traced by `ExportArchive.add_endpoint`), over one
    model and its tokenizers; each takes a batch of strings."""

    def __init__(
        self, model, source_tokenizer, target_tokenizer, max_length, beam_width, length_penalty
    ):
        self.model = model
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        self.max_length = max_length
        self.beam_width = beam_width
        self.length_penalty = length_penalty
        self.start_id = target_tokenizer.token_id(START)
        self.end_id = target_tokenizer.token_id(END)

    def translate_beam(self, text):
        token_ids, _ = beam_search(
            self.model,
            self._encode_trimmed(text),
            self.max_length,
            self.start_id,
            self.end_id,
            beam_width=self.beam_width,
            length_penalty=self.length_penalty,
        )
        return {"translation": self.target_tokenizer.detokenize(token_ids)}

    def translate_greedy(self, text):
        token_ids = self._greedy(self._encode_trimmed(text))
        return {"translation": self.target_tokenizer.detokenize(token_ids)}

    def translate_controlled(
        self, text, beam_width, num_translations, sampling, temperature, top_k, top_p, seed
    ):
        # Clients and the server check these first, from translator.json; the
        # graph refuses them too, for callers of the bare SavedModel.
        checks = [
            _assert_in_range(beam_width, "beam_width", 1, self.beam_width),
            _assert_in_range(num_translations, "num_translations", 1, beam_width, "`beam_width`"),
            tf.debugging.assert_positive(temperature, message="`temperature` must be above 0"),
            tf.debugging.assert_non_negative(top_k, message="`top_k` must be at least 0"),
            tf.debugging.assert_positive(top_p, message="`top_p` must be in (0, 1]"),
            tf.debugging.assert_less_equal(top_p, 1.0, message="`top_p` must be in (0, 1]"),
        ]
        # Every control passes the checks before any op reads it.
        with tf.control_dependencies(checks):
            source_ids = tf.identity(self._encode_trimmed(text))
            beam_width, num_translations, top_k, top_p, temperature = (
                tf.identity(control)
                for control in (beam_width, num_translations, top_k, top_p, temperature)
            )

        def beams():
            token_ids, scores = beam_search(
                self.model,
                source_ids,
                self.max_length,
                self.start_id,
                self.end_id,
                beam_width=beam_width,
                length_penalty=self.length_penalty,
                return_all_beams=True,
            )
            return token_ids[:, :num_translations], scores[:, :num_translations]

        def drawings():
            # Row i * num_translations + j is the j-th drawing for text i: rows
            # draw apart from one stream, so the drawings differ.
            token_ids, scores = sample_decode(
                self.model,
                tf.repeat(source_ids, num_translations, axis=0),
                self.max_length,
                self.start_id,
                self.end_id,
                temperature,
                top_k,
                top_p,
                seed,
            )
            token_ids = tf.reshape(token_ids, [-1, num_translations, self.max_length])
            scores = tf.reshape(scores, [-1, num_translations])
            order = tf.argsort(scores, axis=-1, direction="DESCENDING", stable=True)
            return tf.gather(token_ids, order, batch_dims=1), tf.gather(scores, order, batch_dims=1)

        token_ids, scores = tf.cond(sampling, drawings, beams)
        batch_size = tf.shape(token_ids)[0]
        texts = self.target_tokenizer.detokenize(tf.reshape(token_ids, [-1, self.max_length]))
        return {
            "translations": tf.reshape(texts, [batch_size, num_translations]),
            "scores": scores,
        }

    def attention(self, text):
        model, start_id = self.model, self.start_id
        source_ids = self._encode(text)
        target_ids = tf.ensure_shape(self._greedy(source_ids), [None, self.max_length])
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
        return {
            "source_tokens": _tokens(self.source_tokenizer, source_ids),
            "target_tokens": _tokens(self.target_tokenizer, target_ids),
            "decoder_input_tokens": _tokens(self.target_tokenizer, target_in),
            "cross_attention": _by_layer([block["cross_attention"] for block in scores]),
            "decoder_self_attention": _by_layer([block["self_attention"] for block in scores]),
            "encoder_self_attention": _by_layer(encoder_scores),
        }

    def _encode(self, text):
        return self.source_tokenizer.encode(text, self.model.sequence_length)

    def _encode_trimmed(self, text):
        # The encoder and every step's cross-attention then cost the batch's
        # longest source, not `sequence_length`; the outputs are the same.
        return trim_shared_padding(self._encode(text))

    def _greedy(self, source_ids):
        return greedy_decode(self.model, source_ids, self.max_length, self.start_id, self.end_id)


def _assert_in_range(value, name, minimum, maximum, maximum_name=None):
    """A check that `minimum <= value <= maximum`, its message naming `name` and the range."""
    message = f"`{name}` must be between {minimum} and {maximum_name or maximum}"
    return tf.debugging.assert_equal(
        tf.logical_and(value >= minimum, value <= maximum), True, message=message
    )


def _tokens(tokenizer, token_ids):
    """The tokens of `token_ids`, `""` at padding (id 0)."""
    return tf.where(token_ids > 0, tokenizer.id_to_token(token_ids), "")


def _by_layer(weights):
    """Per-layer attention weights stacked on axis 1, as float32."""
    return tf.stack([tf.cast(layer_weights, tf.float32) for layer_weights in weights], axis=1)
