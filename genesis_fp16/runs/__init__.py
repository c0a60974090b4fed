"""One training run, planned and executed: the request (precision, device, budget), the job
that runs it (in-process, in a child, or under torchrun), the guard's memory, the probe
gate and the device slots. Reads ``config``; reports through ``metrics``."""
