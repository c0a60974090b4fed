"""What the operator configured: settings (environment and ``.env``), where each came from,
the guard's settings, and the state folder's layout. Imports nothing else of the daemon."""
