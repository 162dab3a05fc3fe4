"""Notifications of outbox events to the outside (webhooks as CloudEvents)."""
