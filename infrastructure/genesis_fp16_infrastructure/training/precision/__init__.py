"""Precision: the vocabulary (torch-free names), the policy a trainer runs with, the loss
scaler, the guard's configuration and the remembered demotion. Imports nothing else of the
training package, and this file imports nothing: the torch-free modules stay torch-free."""
