"""The SignatureDefs of a SavedModel, as its `saved_model.pb` holds them.

`tf.saved_model.load` gives each signature's function, but not its
SignatureDef's method name, which TensorFlow Serving's Classify and Regress go
by, nor the tensor names that TensorFlow Serving prints in its errors; both are
read here. `tf.saved_model.save` names every method predict, so an export that
offers Classify rewrites its signature's method with `set_method_name`.
"""

import os

SAVED_MODEL_FILE = "saved_model.pb"

# TensorFlow Serving's method names (tensorflow/cc/saved_model/signature_constants.h, as
# tf.saved_model.PREDICT_METHOD_NAME etc., without importing TensorFlow).
PREDICT_METHOD_NAME = "tensorflow/serving/predict"
CLASSIFY_METHOD_NAME = "tensorflow/serving/classify"
REGRESS_METHOD_NAME = "tensorflow/serving/regress"
# The methods whose signatures take serialized tf.Examples: Classify's and Regress'.
EXAMPLE_METHOD_NAMES = (CLASSIFY_METHOD_NAME, REGRESS_METHOD_NAME)


def read_signature_defs(folder):
    """{name: SignatureDef} of the SavedModel in `folder`: its `serve` graph's (or, where no
    graph is tagged `serve`, its first graph's), the init op left out.

    Raises:
        OSError: `folder` holds no readable `saved_model.pb`.
        google.protobuf.message.DecodeError: the file is not a SavedModel.
    """
    from tensorflow.core.protobuf import saved_model_pb2

    with open(os.path.join(folder, SAVED_MODEL_FILE), "rb") as model_file:
        saved_model = saved_model_pb2.SavedModel.FromString(model_file.read())
    graphs = [graph for graph in saved_model.meta_graphs if "serve" in graph.meta_info_def.tags]
    graphs = graphs or list(saved_model.meta_graphs)
    if not graphs:
        return {}
    return {
        name: signature
        for name, signature in graphs[0].signature_def.items()
        if not name.startswith("__")
    }


def set_method_name(folder, signature_name, method_name):
    """Rewrites the method name of `signature_name` in the SavedModel in `folder` (its
    `saved_model.pb`, and `fingerprint.pb`, whose checksum covers it).

    Args:
        folder: a SavedModel folder, before it is published.
        signature_name: a signature every meta graph of it has.
        method_name: e.g. `"tensorflow/serving/classify"`.
    """
    from tensorflow.core.protobuf import saved_model_pb2
    from tensorflow.python.saved_model import fingerprinting_utils

    path = os.path.join(folder, SAVED_MODEL_FILE)
    with open(path, "rb") as file:
        saved_model = saved_model_pb2.SavedModel.FromString(file.read())
    for meta_graph in saved_model.meta_graphs:
        meta_graph.signature_def[signature_name].method_name = method_name
    with open(path, "wb") as file:
        file.write(saved_model.SerializeToString(deterministic=True))
    if os.path.exists(os.path.join(folder, "fingerprint.pb")):
        # No public API rewrites the fingerprint of a SavedModel changed after its save.
        fingerprinting_utils.write_fingerprint(folder)
