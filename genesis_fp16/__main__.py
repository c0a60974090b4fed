"""`python -m genesis_fp16` runs the CLI (this is what torchrun launches)."""

from genesis_fp16.cli import main

raise SystemExit(main())
