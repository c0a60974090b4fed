"""The agents' events delivered to webhooks: the outbox's events (written by the agent
folder's owner, ``genesis_fp16_infrastructure.agent_folder.outbox``), signed and posted at
least once to ``GENESIS_FP16_EVENTS_URLS`` by the daemon's ``event-delivery`` thread, in
order per agent; ``genesis-fp16 events list|redeliver``. docs/events.md."""
