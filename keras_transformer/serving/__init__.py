"""A model server speaking TensorFlow Serving's REST API (`python -m apps.serve`)."""

from keras_transformer.serving.app import create_app
from keras_transformer.serving.repository import ModelRepository
from keras_transformer.serving.service import PredictionService
from keras_transformer.serving.service import ServerSettings
