"""A model server speaking TensorFlow Serving's REST and gRPC APIs (`keras-transformer serve`).

`create_app` is the REST app; with `ServerSettings.grpc_port` set its start
also serves the gRPC API (`grpc_api`) on the same event loop and service.
"""

from keras_transformer.serving.app import create_app
from keras_transformer.serving.repository import ModelRepository
from keras_transformer.serving.service import PredictionService, ServerSettings

__all__ = ["ModelRepository", "PredictionService", "ServerSettings", "create_app"]
