"""The world model that predicts whether an attempt succeeds: feature encoder, model,
metrics and the prediction API."""

from genesis_fp16_infrastructure.world_model.features import FeatureEncoder
from genesis_fp16_infrastructure.world_model.model import (
    ModelConfig,
    WorldModel,
    WorldModelOutput,
    world_model_losses,
)

__all__ = ["FeatureEncoder", "ModelConfig", "WorldModel", "WorldModelOutput", "world_model_losses"]
