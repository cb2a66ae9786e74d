"""Models built by name from the config. Importing this package registers every model."""
from tasks.models import cnn, digits, family, htfe, resnet, text, vgg  # noqa: F401  (registers)
from tasks.models.base import MODELS, FLModel, ModelParams, build_model, register_model
from tasks.models.init import INIT_SCHEMES, InitScheme, initialize

__all__ = ["INIT_SCHEMES", "MODELS", "FLModel", "InitScheme", "ModelParams", "build_model", "initialize",
           "register_model"]
