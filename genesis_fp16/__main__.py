"""`python -m genesis_fp16` runs the CLI (this is what the daemon's child runs and torchrun
launch): a SIGTERM during the seconds of start-up is held for the command to act on."""

from genesis_fp16.service.startup_signals import hold_sigterm

hold_sigterm()

from genesis_fp16.cli import main  # noqa: E402  (after the hold: this import is the slow part)

raise SystemExit(main())
