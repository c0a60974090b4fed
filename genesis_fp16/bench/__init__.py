"""The precision benchmark behind `genesis-fp16 bench` and `benchmarks/run.py`.

One configuration (size, precision, runner) is measured by `measure.run_config`, usually
in a fresh subprocess (`python -m genesis_fp16.bench.measure`) so that CPU peak RSS
belongs to that configuration alone; `run.run_benchmark` plans the configurations,
collects the rows, derives the ratios and writes the CSV and the plot (`report`).
"""
