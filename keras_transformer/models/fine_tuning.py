"""The optimizer that fine-tunes a pretrained encoder: AdamW with a learning rate
per layer (layer-wise learning-rate decay) and no weight decay on norms and biases."""

import re

import keras
from keras import ops

# The variables BERT's fine-tuning recipes leave out of weight decay: the layer
# norms' scales and offsets (the embeddings' norm too) and every bias. Decay
# pulls them towards 0, which a norm's scale (near 1) and a bias have no reason to be.
NO_DECAY_NAMES = ("gamma", "beta", "bias")


@keras.saving.register_keras_serializable(package="keras_transformer")
class FineTuningAdamW(keras.optimizers.AdamW):
    """AdamW whose learning rate, and with it the decoupled weight decay, is
    scaled per variable by the layer it belongs to.

    Keras gives an optimizer one learning rate; fine-tuning a pretrained
    encoder wants the lower blocks, which hold the most general features,
    to move less than the top and the new head (layer-wise learning-rate
    decay, `PretrainedEncoder.layer_decay_factors`). Each variable's factor
    is looked up once, when the optimizer is built, from the layers named in
    the variable's path; every step then scales the learning rate by it,
    inside `update_step`, so the same code runs on TensorFlow, JAX and
    PyTorch, inside a `LossScaleOptimizer` too.

    Args:
        learning_rate_factors: dict of layer name to factor: a variable whose
            path (e.g. `"pretrained_encoder/encoder_block_0/self_attention/
            query/kernel"`) passes through a layer of that name steps at
            `learning_rate * factor`; the outermost such layer counts. Other
            variables (the head) step at `learning_rate`. A low-rank adapter
            lives inside the layer it adapts, so it gets its block's factor.
        no_decay_names: variable names (e.g. `"bias"`) that get no weight
            decay, through Keras' `exclude_from_weight_decay`.
        **kwargs: `keras.optimizers.AdamW` arguments (`learning_rate`,
            `weight_decay`, `clipnorm`, ...).

    Example:

    >>> from keras_transformer.models import FineTuningAdamW
    >>> optimizer = FineTuningAdamW(
    ...     learning_rate=1e-4, learning_rate_factors={"encoder_block_0": 0.5}
    ... )
    >>> optimizer.learning_rate_factor("pretrained_encoder/encoder_block_0/query/kernel")
    0.5
    >>> optimizer.learning_rate_factor("pretrained_classifier/head/kernel")
    1.0

    With a checkpoint's encoder, `PretrainedEncoder.layer_decay_factors(0.9)`
    gives the factors.

    References:
        Clark et al., "ELECTRA", 2020, appendix A (layer-wise learning-rate decay).
        Loshchilov and Hutter, "Decoupled Weight Decay Regularization", 2019.
    """

    def __init__(self, learning_rate_factors=None, no_decay_names=NO_DECAY_NAMES, **kwargs):
        super().__init__(**kwargs)
        factors = dict(learning_rate_factors or {})
        for name, factor in factors.items():
            if not isinstance(factor, (int, float)) or isinstance(factor, bool) or factor <= 0:
                raise ValueError(
                    f"`learning_rate_factors` must map layer names to positive numbers, got "
                    f"{factor!r} for {name!r}."
                )
        self.learning_rate_factors = {name: float(factor) for name, factor in factors.items()}
        self.no_decay_names = list(no_decay_names)
        # Whole names: a pattern "bias" alone would also exclude any "..._bias_..." variable.
        self.exclude_from_weight_decay(
            var_names=[f"^{re.escape(name)}$" for name in self.no_decay_names]
        )

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        # Indexed as `_get_variable_index` numbers the variables: on TensorFlow,
        # `update_step` sees the backend's variables, which have no Keras path.
        self._factors = [self.learning_rate_factor(variable.path) for variable in variables]
        self._decays = [self._use_weight_decay(variable) for variable in variables]

    def learning_rate_factor(self, path):
        """The factor of the variable at `path`: its outermost layer in
        `learning_rate_factors`, else 1."""
        for name in path.split("/")[:-1]:
            if name in self.learning_rate_factors:
                return self.learning_rate_factors[name]
        return 1.0

    def _apply_weight_decay(self, variables):
        # Keras decays every variable at the one learning rate before the step;
        # `update_step` decays each at its own instead.
        pass

    def update_step(self, gradient, variable, learning_rate):
        index = self._get_variable_index(variable)
        learning_rate = ops.multiply(ops.cast(learning_rate, variable.dtype), self._factors[index])
        if self.weight_decay is not None and self._decays[index]:
            decay = ops.multiply(ops.cast(self.weight_decay, variable.dtype), learning_rate)
            self.assign_sub(variable, ops.multiply(variable, decay))
        super().update_step(gradient, variable, learning_rate)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "learning_rate_factors": dict(self.learning_rate_factors),
                "no_decay_names": list(self.no_decay_names),
            }
        )
        return config
