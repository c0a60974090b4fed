"""What the daemon did and what it serves: ``genesis-fp16 status`` and the page at ``/``."""
