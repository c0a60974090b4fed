"""One scheduled job of one agent, walked plan -> execute -> record: the request (precision,
device, budget), the guard's memory, the probe gate, the served pointer's check and the
run's record. Reads ``config``; starts processes through ``launch``; reports through
``metrics``."""
