"""Precision: the execution vocabulary and the request (torch-free; the precisions' names
are the library root's), the policy a trainer runs with, the loss scaler, the guard's
configuration and the remembered demotion. Imports nothing else of the training package,
and this file imports nothing: the torch-free modules stay torch-free."""
