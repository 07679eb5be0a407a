"""lockwatch's own notifier: incidents to Telegram, Slack, webhooks and Alertmanager.

``message`` says what one message tells of one incident, ``outbox`` decides
which channel hears of which incident and when (routes match its findings),
``render`` formats for each receiver, ``transports`` speak HTTP to the
receivers and ``service`` runs one delivery thread per channel, apart from the
poll loop. An alertmanager channel is no message receiver: ``am_alerts`` makes
alerts of the open incidents and ``alertmanager`` pushes them to each
Alertmanager, from a thread per Alertmanager.
"""
