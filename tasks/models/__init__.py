"""Models built by name from the config. Importing this package registers every model."""
from tasks.models import cnn, digits, family, htfe, resnet, vgg  # noqa: F401  (registers)
from tasks.models.base import MODELS, FLModel, ModelParams, build_model, register_model

__all__ = ["MODELS", "FLModel", "ModelParams", "build_model", "register_model"]
