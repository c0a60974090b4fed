"""One optimizer step: the trainer, its CUDA-graph capture and execution modes, and the
summary it reads back. Builds on ``precision`` and the shared modules beside this one."""
