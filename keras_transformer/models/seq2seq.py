"""The encoder-decoder Transformer of "Attention Is All You Need"."""

import keras
from keras import ops

from keras_transformer.layers import (
    MultiHeadAttention,
    ReceptiveFieldGlorotUniform,
    TokenAndPositionEmbedding,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)
from keras_transformer.layers import padding_mask as make_padding_mask
from keras_transformer.layers.attention import get_attention_class, serialize_attention_class
from keras_transformer.layers.initializers import clone_initializer
from keras_transformer.models.encoder_stack import run_encoder_blocks


@keras.saving.register_keras_serializable(package="keras_transformer")
class Seq2SeqTransformer(keras.Model):
    """Source ids and shifted target ids in, next-token logits out.

    Id 0 is padding on both sides. Besides `call` (teacher forcing, for
    `fit`), the model exposes the pieces a decoder loop needs: `encode`,
    `initialize_cache` and `decode_step`, which runs the decoder on one new
    token with every block's key/value cache, so the encoder runs once per
    batch and each step costs one position.

    Args:
        source_vocabulary_size: source token ids.
        target_vocabulary_size: target token ids.
        sequence_length: the longest source or target, in tokens.
        num_encoder_layers: encoder blocks.
        num_decoder_layers: decoder blocks.
        d_model: width of embeddings and blocks.
        num_heads: attention heads.
        intermediate_dim: feed-forward hidden width.
        dropout: in every block and after the embeddings.
        source_word_dropout: in training, the fraction of source tokens whose
            whole embedding vector is zeroed (the others scaled by
            `1 / (1 - rate)`), so the decoder cannot lean on any one source
            word: a regularizer for small corpora. Defaults to `0.0`.
        share_embeddings: one token table for source, target and the output
            projection (needs one shared vocabulary).
        normalize_first: pre-norm blocks (with final layer norms); trains
            more stably at high learning rates than the paper's post-norm.
        attention_class: `MultiHeadAttention` or a registered subclass, for
            every attention of every block (training and `decode_step` alike).
        kernel_initializer: the blocks' kernels' initializer (each sublayer
            gets its own copy). Defaults to `ReceptiveFieldGlorotUniform`,
            which starts the attention projections smaller than Keras'
            Glorot does in `EinsumDense`.
        **kwargs: base `keras.Model` arguments.

    Call arguments:
        inputs: dict with `source_ids` `[B, S]` and `target_ids` `[B, T]`
            (the target shifted right, starting with `[START]`).
        training: whether dropout is active.

    Returns logits `[B, T, target_vocabulary_size]`, float32.

    Example:

    >>> import keras
    >>> from keras_transformer.models import Seq2SeqTransformer
    >>> model = Seq2SeqTransformer(100, 120, num_encoder_layers=1, num_decoder_layers=1,
    ...                            d_model=32, intermediate_dim=64)
    >>> source_ids = keras.ops.convert_to_tensor([[5, 6, 7, 0], [8, 9, 0, 0]])
    >>> target_ids = keras.ops.convert_to_tensor([[1, 11, 12], [1, 13, 0]])
    >>> logits = model({"source_ids": source_ids, "target_ids": target_ids})
    >>> tuple(logits.shape)
    (2, 3, 120)
    >>> # One decoding step with the caches, as `keras_transformer.decoding` runs it.
    >>> encoder_output, source_mask = model.encode(source_ids)
    >>> self_cache, step_constants = model.initialize_cache(
    ...     encoder_output, source_mask, max_length=8)
    >>> step_logits, self_cache = model.decode_step(
    ...     target_ids[:, :1], 0, self_cache, step_constants)
    >>> tuple(step_logits.shape)
    (2, 120)

    References:
        Vaswani et al., "Attention Is All You Need", 2017.
        Sennrich et al., "Edinburgh Neural Machine Translation Systems for WMT 16", 2016
        (dropping whole source words).
    """

    def __init__(
        self,
        source_vocabulary_size,
        target_vocabulary_size,
        sequence_length=64,
        num_encoder_layers=3,
        num_decoder_layers=3,
        d_model=256,
        num_heads=4,
        intermediate_dim=1024,
        dropout=0.1,
        source_word_dropout=0.0,
        share_embeddings=False,
        normalize_first=True,
        attention_class=MultiHeadAttention,
        kernel_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if share_embeddings and source_vocabulary_size != target_vocabulary_size:
            raise ValueError(
                "`share_embeddings` needs one vocabulary: got source size "
                f"{source_vocabulary_size} and target size {target_vocabulary_size}."
            )
        if d_model % num_heads:
            raise ValueError(
                f"`d_model` ({d_model}) must be divisible by `num_heads` ({num_heads})."
            )
        self.source_vocabulary_size = source_vocabulary_size
        self.target_vocabulary_size = target_vocabulary_size
        self.sequence_length = sequence_length
        self.num_encoder_layers = num_encoder_layers
        self.num_decoder_layers = num_decoder_layers
        self.d_model = d_model
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.source_word_dropout = source_word_dropout
        self.share_embeddings = share_embeddings
        self.normalize_first = normalize_first
        self.attention_class = get_attention_class(attention_class)
        self.kernel_initializer = keras.initializers.get(
            ReceptiveFieldGlorotUniform() if kernel_initializer is None else kernel_initializer
        )

        self._create_layers()

    def _create_layers(self):
        """The embeddings, blocks, final norms and output projection, from the
        arguments `__init__` stored; their attribute and layer names key the
        saved weights."""
        self.source_embedding = self._embedding(self.source_vocabulary_size, "source_embedding")
        self.target_embedding = (
            self.source_embedding
            if self.share_embeddings
            else self._embedding(self.target_vocabulary_size, "target_embedding")
        )
        self.embedding_dropout = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        # One draw per token, broadcast across the width: whole words go missing.
        self.source_word_dropping = keras.layers.Dropout(
            self.source_word_dropout, noise_shape=(None, None, 1), dtype=self.dtype_policy
        )
        self.encoder_blocks = [
            TransformerEncoderBlock(**self._block_arguments(index, "encoder"))
            for index in range(self.num_encoder_layers)
        ]
        self.decoder_blocks = [
            TransformerDecoderBlock(**self._block_arguments(index, "decoder"))
            for index in range(self.num_decoder_layers)
        ]
        norm = dict(epsilon=1e-5, dtype=self.dtype_policy)
        self.encoder_norm = (
            keras.layers.LayerNormalization(name="encoder_norm", **norm)
            if self.normalize_first
            else None
        )
        self.decoder_norm = (
            keras.layers.LayerNormalization(name="decoder_norm", **norm)
            if self.normalize_first
            else None
        )
        # With shared embeddings the output projection is the token table itself.
        self.output_projection = (
            None
            if self.share_embeddings
            else keras.layers.Dense(
                self.target_vocabulary_size, dtype=self.dtype_policy, name="output_projection"
            )
        )

    def _embedding(self, vocabulary_size, name):
        return TokenAndPositionEmbedding(
            vocabulary_size,
            self.sequence_length,
            self.d_model,
            mask_zero=True,
            positional="sinusoidal",
            dtype=self.dtype_policy,
            name=name,
        )

    def _block_arguments(self, index, kind):
        return dict(
            num_heads=self.num_heads,
            intermediate_dim=self.intermediate_dim,
            dropout=self.dropout,
            activation="relu",
            normalize_first=self.normalize_first,
            attention_class=self.attention_class,
            kernel_initializer=clone_initializer(self.kernel_initializer, f"{kind}_block_{index}"),
            dtype=self.dtype_policy,
            name=f"{kind}_block_{index}",
        )

    def build(self, input_shape=None):
        batch = None
        source_shape, target_shape = (batch, self.sequence_length), (batch, self.sequence_length)
        self.source_embedding.build(source_shape)
        if not self.share_embeddings:
            self.target_embedding.build(target_shape)
            self.output_projection.build((batch, self.sequence_length, self.d_model))
        width = (batch, self.sequence_length, self.d_model)
        for block in self.encoder_blocks:
            block.build(width)
        for block in self.decoder_blocks:
            block.build(width, width)
        for norm in (self.encoder_norm, self.decoder_norm):
            if norm is not None:
                norm.build(width)
        self.built = True

    # --- the pieces ---------------------------------------------------------------

    def encode(self, source_ids, training=None, return_attention_scores=False):
        """`[B, S]` ids -> (`[B, S, d]` encoder output, `[B, S]` bool padding mask)
        (and each block's self-attention weights `[B, heads, S, S]`)."""
        source_mask = make_padding_mask(source_ids)
        x = self.embed_source(source_ids, training=training)
        x, scores = run_encoder_blocks(
            self.encoder_blocks, x, source_mask, training, return_attention_scores
        )
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return (x, source_mask, scores) if return_attention_scores else (x, source_mask)

    def embed_source(self, source_ids, training=None):
        """`[B, S]` ids -> `[B, S, d]`: the source embeddings with both dropouts, the
        encoder blocks' input."""
        x = self.source_word_dropping(self.source_embedding(source_ids), training=training)
        return self.embedding_dropout(x, training=training)

    def decode(
        self, target_ids, encoder_output, source_mask, training=None, return_attention_scores=False
    ):
        """Teacher-forced decoder: `[B, T]` ids -> logits `[B, T, V]` (and each block's scores)."""
        x = self.embedding_dropout(self.target_embedding(target_ids), training=training)
        target_mask = make_padding_mask(target_ids)
        scores = []
        for block in self.decoder_blocks:
            x = block(
                x,
                encoder_sequence=encoder_output,
                decoder_padding_mask=target_mask,
                encoder_padding_mask=source_mask,
                training=training,
                return_attention_scores=return_attention_scores,
            )
            if return_attention_scores:
                x, block_scores = x
                scores.append(block_scores)
        logits = self._logits(x)
        return (logits, scores) if return_attention_scores else logits

    def initialize_cache(self, encoder_output, source_mask, max_length):
        """State for `decode_step`: `(self_cache, step_constants)`.

        `self_cache` holds one zero `[2, B, heads, max_length, head_dim]` key/value
        cache per decoder block (a tuple, not one stacked tensor: stacking and
        slicing it at every step copied every cache twice per token).
        `step_constants` holds what every step reads and none changes, so that
        a decoding loop computes it once, outside the loop: the source mask,
        each block's cross-attention cache and projection matrices
        (`TransformerDecoderBlock.compute_cross_attention_cache` and
        `compute_projection_matrices`), and the output projection's kernel.
        """
        batch_size = ops.shape(encoder_output)[0]
        self_cache = tuple(
            block.initialize_self_attention_cache(batch_size, max_length)
            for block in self.decoder_blocks
        )
        step_constants = {
            "source_mask": source_mask,
            "cross_attention_caches": tuple(
                block.compute_cross_attention_cache(encoder_output) for block in self.decoder_blocks
            ),
            "projection_matrices": tuple(
                block.compute_projection_matrices() for block in self.decoder_blocks
            ),
        }
        output_matrix = self._output_matrix()
        if output_matrix is not None:
            output_kernel, output_bias = output_matrix
            step_constants["output_kernel"] = output_kernel
            if output_bias is not None:
                step_constants["output_bias"] = output_bias
        return self_cache, step_constants

    def decode_step(self, token_ids, index, self_cache, step_constants):
        """One decoding step: `[B, 1]` ids at position `index` -> (logits `[B, V]`,
        new self cache). Each decoder block runs as a cached call."""
        x = self.target_embedding(token_ids, start_index=index)
        new_caches = []
        for block, block_cache, cross_cache, matrices in zip(
            self.decoder_blocks,
            self_cache,
            step_constants["cross_attention_caches"],
            step_constants["projection_matrices"],
        ):
            x, new_cache = block(
                x,
                encoder_padding_mask=step_constants["source_mask"],
                self_attention_cache=block_cache,
                self_attention_cache_update_index=index,
                cross_attention_cache=cross_cache,
                projection_matrices=matrices,
            )
            new_caches.append(new_cache)
        return self._logits(
            ops.reshape(x, (-1, self.d_model)),
            step_constants.get("output_kernel"),
            step_constants.get("output_bias"),
        ), tuple(new_caches)

    def _output_matrix(self):
        """Output projection `(kernel [d, V], bias [V] or None)` in the compute dtype, or
        None when the projection is quantized (`model.quantize("int8")`): its kernel is then
        integers and a scale, no float matrix, and `_logits` calls the layer instead."""
        if self.share_embeddings:
            table = self.target_embedding.token_embedding.embeddings
            return ops.transpose(ops.cast(table, self.compute_dtype)), None
        projection = self.output_projection
        if projection.quantization_mode is not None:
            return None
        return ops.cast(projection.kernel, self.compute_dtype), ops.cast(
            projection.bias, self.compute_dtype
        )

    def _logits(self, x, kernel=None, bias=None):
        """`[..., d]` decoder output -> float32 logits `[..., V]`; `kernel` and
        `bias` as `_output_matrix` gives them (computed here when not given; a
        quantized output projection has none and runs as its layer)."""
        if self.decoder_norm is not None:
            x = self.decoder_norm(x)
        if kernel is None:
            kernel, bias = self._output_matrix() or (None, None)
        shape = ops.shape(x)
        # A 2-D matmul (a rank-3 one is a `tensordot` on TensorFlow); the
        # result is a fresh tensor without the Keras mask the layers passed
        # along, which Keras would apply a second time in the loss.
        flat = ops.reshape(x, (-1, shape[-1]))
        if kernel is None:
            logits = self.output_projection(flat)
        else:
            logits = ops.matmul(flat, kernel)
            if bias is not None:
                logits = logits + bias
        return ops.cast(ops.reshape(logits, (*shape[:-1], -1)), "float32")

    # --- Keras ----------------------------------------------------------------------

    def call(self, inputs, training=None):
        encoder_output, source_mask = self.encode(inputs["source_ids"], training=training)
        return self.decode(inputs["target_ids"], encoder_output, source_mask, training=training)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "source_vocabulary_size": self.source_vocabulary_size,
                "target_vocabulary_size": self.target_vocabulary_size,
                "sequence_length": self.sequence_length,
                "num_encoder_layers": self.num_encoder_layers,
                "num_decoder_layers": self.num_decoder_layers,
                "d_model": self.d_model,
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "dropout": self.dropout,
                "source_word_dropout": self.source_word_dropout,
                "share_embeddings": self.share_embeddings,
                "normalize_first": self.normalize_first,
                "attention_class": serialize_attention_class(self.attention_class),
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config
