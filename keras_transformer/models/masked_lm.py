"""A masked language model over the classifier's encoder, for pretraining it."""

import keras
from keras import ops

from keras_transformer.layers import MultiHeadAttention
from keras_transformer.models.encoder_stack import EncoderStack


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedLanguageModel(EncoderStack, keras.Model):
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
        self._create_encoder_stack(
            vocabulary_size,
            sequence_length,
            num_layers,
            d_model,
            num_heads,
            intermediate_dim,
            dropout,
            positional,
            normalize_first,
            attention_class,
        )
        self.head_transform = keras.layers.Dense(
            d_model, activation="gelu", dtype=self.dtype_policy, name="head_transform"
        )
        self.head_norm = keras.layers.LayerNormalization(
            epsilon=1e-5, dtype=self.dtype_policy, name="head_norm"
        )

    def build(self, token_ids_shape):
        sequence_shape = self._build_encoder_stack(token_ids_shape)
        self.head_transform.build(sequence_shape)
        self.head_norm.build(sequence_shape)
        # The one weight of the output projection that is not the embedding's.
        self.output_bias = self.add_weight(
            name="output_bias", shape=(self.vocabulary_size,), initializer="zeros"
        )
        self.built = True

    @property
    def output_kernel(self):
        """The output projection's matrix `[V, d]`: the token embedding's variable itself."""
        return self.embedding.token_embedding.embeddings

    def call(self, token_ids, training=None):
        x, _, _ = self._encode(token_ids, training)
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
        targets = classifier.encoder_layers
        if [layer.name for layer in targets] != [layer.name for layer in self.encoder_layers]:
            raise ValueError(
                "The classifier's encoder "
                f"({', '.join(layer.name for layer in targets)}) is not this model's "
                f"({', '.join(layer.name for layer in self.encoder_layers)})."
            )
        for source, target in zip(self.encoder_layers, targets, strict=True):
            target.set_weights(source.get_weights())

    def compute_output_shape(self, token_ids_shape):
        return (*token_ids_shape, self.vocabulary_size)

    def get_config(self):
        config = super().get_config()
        config.update(self._encoder_config())
        return config
