"""lockwatch's own notifier: findings to Telegram, Slack and webhooks.

``settings`` holds the frozen config values, ``routing`` decides which channel
hears of which finding and when, ``message`` groups and renders, ``transports``
speak HTTP to the receivers and ``service`` runs one delivery thread per
channel, apart from the poll loop.
"""
