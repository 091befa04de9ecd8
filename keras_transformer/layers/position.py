"""Positional encodings: fixed sinusoids, learned embeddings, and token + position."""

import math

import keras
from keras import ops

from keras_transformer.layers.initializers import clone_initializer


@keras.saving.register_keras_serializable(package="keras_transformer")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """The paper's fixed sinusoidal position encoding, interleaved sin/cos.

    For inputs `[B, T, d]` returns encodings of the same shape (not added to
    the inputs) with

        PE[p, 2i]   = sin(p / max_wavelength ** (2i / d))
        PE[p, 2i+1] = cos(p / max_wavelength ** (2i / d))

    Args:
        max_wavelength: the longest wavelength, 10000 in the paper.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: `[B, T, d]`; only its shape is used.
        start_index: position of the first input (for decoding with a cache).

    Example:

    >>> import keras
    >>> from keras_transformer.layers import SinusoidalPositionEncoding
    >>> embedded = keras.random.normal((2, 10, 16))
    >>> encoding = SinusoidalPositionEncoding()(embedded)
    >>> tuple(encoding.shape)
    (2, 10, 16)
    >>> [round(float(value), 4) for value in encoding[0, 1, :2]]  # sin(1), cos(1)
    [0.8415, 0.5403]

    References:
        Vaswani et al., "Attention Is All You Need", 2017, section 3.5.
    """

    def __init__(self, max_wavelength=10000, **kwargs):
        super().__init__(**kwargs)
        if max_wavelength <= 1:
            raise ValueError(f"`max_wavelength` must be > 1, got {max_wavelength!r}.")
        self.max_wavelength = max_wavelength
        self.supports_masking = True
        self.built = True

    def call(self, inputs, start_index=0):
        length = ops.shape(inputs)[-2]
        depth = inputs.shape[-1]
        positions = ops.cast(ops.arange(length) + start_index, "float32")
        columns = ops.arange(depth)
        # Columns 2i and 2i+1 share the frequency 1 / max_wavelength**(2i/d).
        exponents = ops.cast(columns - columns % 2, "float32") / depth
        frequencies = ops.exp(-math.log(self.max_wavelength) * exponents)
        angles = ops.expand_dims(positions, -1) * ops.expand_dims(frequencies, 0)
        encoding = ops.where(columns % 2 == 0, ops.sin(angles), ops.cos(angles))
        return ops.broadcast_to(ops.cast(encoding, self.compute_dtype), ops.shape(inputs))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"max_wavelength": self.max_wavelength})
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionEmbedding(keras.layers.Layer):
    """Learned position embeddings, one trainable vector per position.

    For inputs `[B, T, d]` returns the embeddings of positions `0..T-1`,
    broadcast to `[B, T, d]` (not added to the inputs).

    Args:
        sequence_length: the most positions the layer can embed.
        initializer: initializer of the `[sequence_length, d]` table.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: `[B, T, d]` with `T <= sequence_length`.
        start_index: position of the first input (for decoding with a cache).

    Example:

    >>> import keras
    >>> from keras_transformer.layers import PositionEmbedding
    >>> embedded = keras.random.normal((2, 10, 16))
    >>> with_positions = embedded + PositionEmbedding(sequence_length=64)(embedded)
    >>> tuple(with_positions.shape)
    (2, 10, 16)

    References:
        Gehring et al., "Convolutional Sequence to Sequence Learning", 2017.
    """

    def __init__(self, sequence_length, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        if not isinstance(sequence_length, int) or sequence_length <= 0:
            raise ValueError(
                f"`sequence_length` must be a positive integer, got {sequence_length!r}."
            )
        self.sequence_length = sequence_length
        self.initializer = keras.initializers.get(initializer)
        self.supports_masking = True

    def build(self, input_shape):
        if input_shape[-2] is not None and input_shape[-2] > self.sequence_length:
            raise ValueError(
                f"Inputs have {input_shape[-2]} positions but `sequence_length` is "
                f"{self.sequence_length}."
            )
        self.position_embeddings = self.add_weight(
            name="embeddings",
            shape=(self.sequence_length, input_shape[-1]),
            initializer=self.initializer,
        )

    def call(self, inputs, start_index=0):
        length = ops.shape(inputs)[-2]
        # JAX's slice clamps an out-of-range start silently; catch what is knowable here.
        if isinstance(start_index, int) and isinstance(length, int):
            if start_index + length > self.sequence_length:
                raise ValueError(
                    f"Positions {start_index}..{start_index + length - 1} are past "
                    f"`sequence_length` ({self.sequence_length})."
                )
        # A tensor, not the variable: JAX refuses to slice a Keras variable directly.
        table = ops.convert_to_tensor(self.position_embeddings)
        embeddings = ops.slice(table, (start_index, 0), (length, table.shape[-1]))
        return ops.broadcast_to(ops.cast(embeddings, self.compute_dtype), ops.shape(inputs))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "sequence_length": self.sequence_length,
                "initializer": keras.initializers.serialize(self.initializer),
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class TokenAndPositionEmbedding(keras.layers.Layer):
    """Token embeddings, scaled by sqrt(d) as in the paper, plus positions.

    Args:
        vocabulary_size: number of token ids.
        sequence_length: the most positions the layer can embed.
        embedding_dim: d, the embedding size.
        mask_zero: whether id 0 is padding; the output then carries a Keras
            mask (True at real tokens) that later layers honour.
        positional: `"sinusoidal"` (fixed) or `"learned"`.
        scale_embeddings: multiply token embeddings by sqrt(d) before adding
            positions (the paper, section 3.4).
        max_wavelength: of the sinusoidal encoding.
        embeddings_initializer: of the token table.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        token_ids: int `[B, T]`.
        start_index: position of the first token (for decoding with a cache).

    Example:

    >>> import keras
    >>> from keras_transformer.layers import TokenAndPositionEmbedding
    >>> embedding = TokenAndPositionEmbedding(1000, 64, 32)
    >>> embedded = embedding(keras.ops.convert_to_tensor([[5, 9, 2, 0, 0]]))
    >>> tuple(embedded.shape)
    (1, 5, 32)
    >>> keras.ops.convert_to_numpy(embedding.compute_mask([[5, 9, 2, 0, 0]])).tolist()
    [[True, True, True, False, False]]

    References:
        Vaswani et al., "Attention Is All You Need", 2017, sections 3.4-3.5.
    """

    def __init__(
        self,
        vocabulary_size,
        sequence_length,
        embedding_dim,
        mask_zero=True,
        positional="sinusoidal",
        scale_embeddings=True,
        max_wavelength=10000,
        embeddings_initializer="uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if positional not in ("sinusoidal", "learned"):
            raise ValueError(f'`positional` must be "sinusoidal" or "learned", got {positional!r}.')
        for name, number in (
            ("vocabulary_size", vocabulary_size),
            ("sequence_length", sequence_length),
            ("embedding_dim", embedding_dim),
        ):
            if not isinstance(number, int) or number <= 0:
                raise ValueError(f"`{name}` must be a positive integer, got {number!r}.")
        self.vocabulary_size = vocabulary_size
        self.sequence_length = sequence_length
        self.embedding_dim = embedding_dim
        self.mask_zero = mask_zero
        self.positional = positional
        self.scale_embeddings = scale_embeddings
        self.max_wavelength = max_wavelength
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.supports_masking = mask_zero
        self.token_embedding = keras.layers.Embedding(
            vocabulary_size,
            embedding_dim,
            embeddings_initializer=clone_initializer(
                self.embeddings_initializer, "token_embedding"
            ),
            mask_zero=mask_zero,
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        if positional == "sinusoidal":
            self.position_encoding = SinusoidalPositionEncoding(
                max_wavelength, dtype=self.dtype_policy, name="position_encoding"
            )
        else:
            self.position_encoding = PositionEmbedding(
                sequence_length, dtype=self.dtype_policy, name="position_embedding"
            )

    def build(self, input_shape):
        if input_shape[-1] is not None and input_shape[-1] > self.sequence_length:
            raise ValueError(
                f"Inputs have {input_shape[-1]} tokens but "
                f"`sequence_length` is {self.sequence_length}."
            )
        self.token_embedding.build(input_shape)
        self.position_encoding.build((*input_shape, self.embedding_dim))

    def call(self, token_ids, start_index=0):
        embedded = self.token_embedding(token_ids)
        if self.scale_embeddings:
            embedded = embedded * ops.cast(math.sqrt(self.embedding_dim), embedded.dtype)
        return embedded + self.position_encoding(embedded, start_index=start_index)

    def compute_mask(self, inputs, mask=None):
        if not self.mask_zero:
            return None
        return ops.not_equal(inputs, 0)

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.embedding_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "sequence_length": self.sequence_length,
                "embedding_dim": self.embedding_dim,
                "mask_zero": self.mask_zero,
                "positional": self.positional,
                "scale_embeddings": self.scale_embeddings,
                "max_wavelength": self.max_wavelength,
                "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            }
        )
        return config
