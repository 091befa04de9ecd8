"""Post-training int8 quantization of a model before it is exported.

`quantize_int8(model)` applies Keras' own weight quantization (`Model.quantize("int8")`) to the
model's dense projections only: every `keras.layers.Dense` and `keras.layers.EinsumDense`
(the attention's query, key, value and output projections, the feed-forward layers, the
pooler, the classification head and the translator's output projection). Each kernel
becomes int8 with one float32 scale per output unit (`kernel_scale`); at call time the
layer quantizes its inputs per row, multiplies in integers and scales the result back
to floats. Embedding tables, layer norms, biases and the bag of n-grams stay float32.

The quantized model exports unchanged through `export_classifier` and `export_translator`:
the SavedModel holds the int8 kernels and the ops that use them, so it still loads with
TensorFlow and tensorflow-text alone. Quantize just before exporting: the project's models
build their projections from their own float dtype policy, so a quantized model saved to
`.keras` does not load back (its int8 kernels find float layers).

Example:

>>> import keras
>>> from keras_transformer.export.quantize import quantize_int8
>>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
>>> _ = quantize_int8(model)
>>> keras.backend.standardize_dtype(model.layers[0]._kernel.dtype)
'int8'
"""

import keras

# The modes `quantize_int8`'s callers may name; "int8" is the only one so far.
QUANTIZATION_MODES = ("int8",)

# Layers whose weights Keras quantizes and that we quantize: the dense projections. Keras
# would quantize embeddings too; their tables are looked up, not multiplied, so int8 would
# save memory but no time and cost accuracy.
QUANTIZED_LAYER_TYPES = (keras.layers.Dense, keras.layers.EinsumDense)


def check_quantization_mode(mode):
    """Raises a ValueError unless `mode` is one of `QUANTIZATION_MODES`.

    Args:
        mode: str, the quantization mode asked for (e.g. a `--quantize` flag's value).

    Raises:
        ValueError: `mode` is not a supported mode.
    """
    if mode not in QUANTIZATION_MODES:
        raise ValueError(
            f"Unsupported quantization mode {mode!r}: choose one of "
            f"{', '.join(repr(name) for name in QUANTIZATION_MODES)}."
        )


def is_quantized_layer_type(layer):
    """Whether `quantize_int8` quantizes `layer`: a `Dense` or `EinsumDense` (or subclass).

    Args:
        layer: a `keras.layers.Layer`.

    Returns:
        bool.
    """
    return isinstance(layer, QUANTIZED_LAYER_TYPES)


def quantize_int8(model, mode="int8"):
    """Quantizes the dense projections of a built `model` to int8 in place, and returns it.

    Calls `model.quantize(mode)` with a filter that keeps it to `Dense` and `EinsumDense`
    layers (see the module docstring). Call it on the model that is about to be exported,
    after training: a quantized model is for inference (its int8 kernels no longer train).

    Args:
        model: a built `keras.Model` (e.g. a `TransformerClassifier`, `PretrainedClassifier`
            or `Seq2SeqTransformer` loaded from a run folder), not quantized yet.
        mode: str, the quantization mode; only `"int8"`.

    Returns:
        `model`, its `Dense` and `EinsumDense` layers quantized.

    Raises:
        ValueError: `mode` is not `"int8"`; `model` is not a Keras model, is not built,
            is already quantized, or has no dense layer to quantize.
    """
    check_quantization_mode(mode)
    if not isinstance(model, keras.Model):
        raise ValueError(f"`model` must be a keras.Model to quantize, got {type(model).__name__}.")
    if not model.built:
        raise ValueError(
            f"The model {model.name!r} is not built: build it (or call it once) before "
            "quantizing, so that its kernels exist."
        )
    dense_layers = [layer for layer in model._flatten_layers() if is_quantized_layer_type(layer)]
    if not dense_layers:
        raise ValueError(f"The model {model.name!r} has no Dense or EinsumDense layer to quantize.")
    already = sorted({layer.quantization_mode for layer in dense_layers} - {None})
    if already:
        raise ValueError(
            f"The model {model.name!r} is already quantized ({', '.join(already)}): quantize "
            "the float model once."
        )
    model.quantize(mode, filters=is_quantized_layer_type)
    return model
