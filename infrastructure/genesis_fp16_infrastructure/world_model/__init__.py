"""The world model that predicts whether an attempt succeeds: feature encoder, model,
metrics and the prediction API."""
