"""Every docstring example of the layers and models runs and prints what it says (doctest)."""

import doctest
import importlib
import inspect
import pkgutil

import keras
import pytest

import keras_transformer.layers
import keras_transformer.models

MODULES = [
    f"{package.__name__}.{info.name}"
    for package in (keras_transformer.layers, keras_transformer.models)
    for info in pkgutil.iter_modules(package.__path__)
]


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples_pass(module_name):
    module = importlib.import_module(module_name)
    keras.utils.set_random_seed(0)
    results = doctest.testmod(module, verbose=False, report=True, optionflags=doctest.ELLIPSIS)
    assert results.failed == 0, (
        f"{results.failed} docstring example(s) of {module_name} failed (printed above)"
    )


@pytest.mark.parametrize(
    "package", [keras_transformer.layers, keras_transformer.models], ids=lambda p: p.__name__
)
def test_every_public_layer_and_model_has_an_example(package):
    public = [getattr(package, name) for name in package.__all__]
    classes = [item for item in public if inspect.isclass(item)]
    assert classes
    missing = [cls.__name__ for cls in classes if ">>>" not in (cls.__doc__ or "")]
    assert not missing, f"no runnable Example in the docstring of {missing}"
