"""A masked language model over the classifier's encoder, for pretraining it."""

import numbers

import keras
from keras import ops

from keras_transformer.layers import MultiHeadAttention
from keras_transformer.layers import TokenAndPositionEmbedding
from keras_transformer.layers import TransformerEncoderBlock
from keras_transformer.layers import padding_mask as make_padding_mask
from keras_transformer.layers.attention import get_attention_class
from keras_transformer.layers.attention import serialize_attention_class


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedLanguageModel(keras.Model):
    """Token ids with some replaced by `[MASK]` in, logits over the vocabulary out.

    The same embedding, encoder blocks and final norm, under the same names,
    as a `TransformerClassifier` of the same settings, so that
    `copy_encoder_to` can hand the pretrained weights to one. The head is
    BERT's: a dense layer with GELU, a layer norm, then a projection onto the
    vocabulary whose matrix is the token embedding's own (tied), plus a bias.
    Id 0 is padding.

    Args:
        vocabulary_size: number of token ids.
        sequence_length: the longest input, in tokens.
        num_layers: encoder blocks.
        d_model: width of embeddings and blocks.
        num_heads: attention heads per block.
        intermediate_dim: feed-forward hidden width.
        dropout: in the blocks and after the embedding.
        positional: `"learned"` or `"sinusoidal"` position information.
        normalize_first: pre-norm blocks (with a final layer norm).
        attention_class: `MultiHeadAttention` or a registered subclass, for
            every block's self-attention.
        **kwargs: base `keras.Model` arguments (`name`, `dtype`).

    Call arguments:
        token_ids: int `[B, T]`, 0-padded.
        training: whether dropout is active.

    Returns float32 logits `[B, T, vocabulary_size]`.

    Example:

    >>> import keras
    >>> from keras_transformer.models import MaskedLanguageModel, TransformerClassifier
    >>> masked_lm = MaskedLanguageModel(vocabulary_size=8000, sequence_length=16, num_layers=1)
    >>> tuple(masked_lm(keras.ops.ones((2, 16), "int32")).shape)
    (2, 16, 8000)
    >>> classifier = TransformerClassifier(8000, num_classes=3, sequence_length=16, num_layers=1)
    >>> classifier.build((None, 16))
    >>> masked_lm.copy_encoder_to(classifier)

    References:
        Devlin et al., "BERT", 2019, section 3.1 (masked LM) and appendix A.1.
        Press and Wolf, "Using the Output Embedding to Improve Language Models", 2017.
    """

    def __init__(
        self,
        vocabulary_size,
        sequence_length=256,
        num_layers=2,
        d_model=128,
        num_heads=4,
        intermediate_dim=256,
        dropout=0.1,
        positional="learned",
        normalize_first=False,
        attention_class=MultiHeadAttention,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not isinstance(num_layers, numbers.Integral) or num_layers < 1:
            raise ValueError(f"`num_layers` must be a positive integer, got {num_layers!r}.")
        if not isinstance(d_model, int) or not isinstance(num_heads, int) or d_model % num_heads:
            raise ValueError(f"`d_model` ({d_model}) must be divisible by `num_heads` ({num_heads}).")
        self.vocabulary_size = vocabulary_size
        self.sequence_length = sequence_length
        self.num_layers = num_layers
        self.d_model = d_model
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.positional = positional
        self.normalize_first = normalize_first
        self.attention_class = get_attention_class(attention_class)

        self.embedding = TokenAndPositionEmbedding(
            vocabulary_size,
            sequence_length,
            d_model,
            mask_zero=True,
            positional=positional,
            dtype=self.dtype_policy,
            name="embedding",
        )
        self.embedding_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self.encoder_blocks = [
            TransformerEncoderBlock(
                num_heads=num_heads,
                intermediate_dim=intermediate_dim,
                dropout=dropout,
                activation="gelu",
                normalize_first=normalize_first,
                attention_class=self.attention_class,
                dtype=self.dtype_policy,
                name=f"encoder_block_{index}",
            )
            for index in range(num_layers)
        ]
        self.final_norm = (
            keras.layers.LayerNormalization(epsilon=1e-5, dtype=self.dtype_policy, name="final_norm")
            if normalize_first
            else None
        )
        self.head_transform = keras.layers.Dense(
            d_model, activation="gelu", dtype=self.dtype_policy, name="head_transform"
        )
        self.head_norm = keras.layers.LayerNormalization(epsilon=1e-5, dtype=self.dtype_policy, name="head_norm")

    def build(self, token_ids_shape):
        self.embedding.build(token_ids_shape)
        sequence_shape = (*token_ids_shape, self.d_model)
        for block in self.encoder_blocks:
            block.build(sequence_shape)
        if self.final_norm is not None:
            self.final_norm.build(sequence_shape)
        self.head_transform.build(sequence_shape)
        self.head_norm.build(sequence_shape)
        # The one weight of the output projection that is not the embedding's.
        self.output_bias = self.add_weight(name="output_bias", shape=(self.vocabulary_size,),
                                           initializer="zeros")
        self.built = True

    @property
    def encoder_layers(self):
        """The layers a `TransformerClassifier` shares, in order: embedding, blocks, final norm."""
        return [self.embedding, *self.encoder_blocks, *([self.final_norm] if self.final_norm else [])]

    @property
    def output_kernel(self):
        """The output projection's matrix `[V, d]`: the token embedding's variable itself."""
        return self.embedding.token_embedding.embeddings

    def call(self, token_ids, training=None):
        padding_mask = make_padding_mask(token_ids)
        x = self.embedding_dropout(self.embedding(token_ids), training=training)
        for block in self.encoder_blocks:
            x = block(x, padding_mask=padding_mask, training=training)
        if self.final_norm is not None:
            x = self.final_norm(x)
        x = self.head_norm(self.head_transform(x))
        shape = ops.shape(x)
        kernel = ops.cast(self.output_kernel, self.compute_dtype)
        # A 2-D matmul on a reshaped input: the result carries no Keras mask,
        # which the loss would otherwise apply on top of its own (the labels
        # say which positions count).
        logits = ops.matmul(ops.reshape(x, (-1, shape[-1])), ops.transpose(kernel))
        logits = logits + ops.cast(self.output_bias, self.compute_dtype)
        return ops.cast(ops.reshape(logits, (*shape[:-1], self.vocabulary_size)), "float32")

    def copy_encoder_to(self, classifier):
        """Sets `classifier`'s embedding, encoder blocks and final norm to this model's weights.

        `classifier` (a built `TransformerClassifier`) must have the same
        vocabulary size, sequence length, width and number of blocks.
        """
        targets = [classifier.embedding, *classifier.encoder_blocks,
                   *([classifier.final_norm] if classifier.final_norm is not None else [])]
        if [layer.name for layer in targets] != [layer.name for layer in self.encoder_layers]:
            raise ValueError(
                f"The classifier's encoder ({', '.join(layer.name for layer in targets)}) is not this "
                f"model's ({', '.join(layer.name for layer in self.encoder_layers)})."
            )
        for source, target in zip(self.encoder_layers, targets, strict=True):
            target.set_weights(source.get_weights())

    def compute_output_shape(self, token_ids_shape):
        return (*token_ids_shape, self.vocabulary_size)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "sequence_length": self.sequence_length,
                "num_layers": self.num_layers,
                "d_model": self.d_model,
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "dropout": self.dropout,
                "positional": self.positional,
                "normalize_first": self.normalize_first,
                "attention_class": serialize_attention_class(self.attention_class),
            }
        )
        return config
